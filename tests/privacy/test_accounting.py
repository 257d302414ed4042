"""Tests for dpfair_jax.privacy.accounting against dp-accounting, closed forms and brute force."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
from scipy import special

from dpfair_jax.privacy import accounting as A

NR = dp_accounting.NeighboringRelation


# ----------------------------------------------------------------------------- dp-accounting


def _direct_rdp(z, q, steps, delta, relation=NR.ADD_OR_REMOVE_ONE, wor_n=None):
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    g = dp_accounting.GaussianDpEvent(z)
    if wor_n is None:
        ev = dp_accounting.PoissonSampledDpEvent(q, g)
    else:
        ev = dp_accounting.SampledWithoutReplacementDpEvent(wor_n, int(round(q * wor_n)), g)
    return acc.compose(ev, steps).get_epsilon(delta)


def _direct_pld(z, q, steps, delta):
    acc = dp_accounting.pld.PLDAccountant()
    ev = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    return acc.compose(ev, steps).get_epsilon(delta)


GRID = [(z, q, t, d) for z in (0.8, 1.5) for q in (0.01, 0.1) for t in (10, 200) for d in (1e-5, 1e-3)]


@pytest.mark.parametrize("z,q,steps,delta", GRID)
def test_rdp_poisson_matches_dp_accounting(z, q, steps, delta):
    ours = A.dpsgd_epsilon(z, q, steps, delta, accountant="rdp")
    assert ours == pytest.approx(_direct_rdp(z, q, steps, delta), rel=1e-2)


@pytest.mark.parametrize("z,q,steps,delta", GRID[::3])
def test_rdp_without_replacement_matches_dp_accounting(z, q, steps, delta):
    n = 1000
    ours = A.dpsgd_epsilon(z, q, steps, delta, sampling="without_replacement", dataset_size=n)
    ref = _direct_rdp(z, q, steps, delta, relation=NR.REPLACE_ONE, wor_n=n)
    assert ours == pytest.approx(ref, rel=1e-2)
    # the dataset size only enters through q, so it may be omitted
    assert A.dpsgd_epsilon(z, q, steps, delta, sampling="without_replacement") == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("z,q,steps,delta", GRID[::4])
def test_pld_poisson_matches_dp_accounting(z, q, steps, delta):
    ours = A.dpsgd_epsilon(z, q, steps, delta, accountant="pld")
    assert ours == pytest.approx(_direct_pld(z, q, steps, delta), rel=1e-2)


def test_pld_tighter_than_rdp():
    for z, q, t, d in GRID[1::7]:
        assert A.dpsgd_epsilon(z, q, t, d, accountant="pld") <= A.dpsgd_epsilon(z, q, t, d) * (1 + 1e-3)


def test_event_structure():
    ev = A.dpsgd_event(1.0, 0.05, 7)
    assert isinstance(ev, dp_accounting.SelfComposedDpEvent) and ev.count == 7
    assert isinstance(ev.event, dp_accounting.PoissonSampledDpEvent)
    ev2 = A.dpsgd_event(1.0, 0.05, 7, sampling="without_replacement", dataset_size=200,
                        relative_noise=(1.0, 2.0))
    inner = ev2.event
    assert isinstance(inner, dp_accounting.SampledWithoutReplacementDpEvent)
    assert (inner.source_dataset_size, inner.sample_size) == (200, 10)
    assert [g.noise_multiplier for g in inner.event.events] == [1.0, 2.0]
    assert isinstance(A.dpsgd_event(0.0, 0.05, 7), dp_accounting.NonPrivateDpEvent)
    assert A.dpsgd_epsilon(0.0, 0.05, 7, 1e-5) == math.inf


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_several_mechanisms_equal_effective_gaussian(accountant):
    """Gaussian composition identity: z_eff = (sum_j z_j^-2)^(-1/2)."""
    z, q, t, d = 2.0, 0.05, 20, 1e-5
    two = A.dpsgd_epsilon(z, q, t, d, accountant=accountant, mechanisms_per_step=2)
    one = A.dpsgd_epsilon(z / math.sqrt(2.0), q, t, d, accountant=accountant)
    assert two == pytest.approx(one, rel=1e-6)
    rel = (1.0, 2.0, 0.5)
    z_eff = z * sum(r**-2 for r in rel) ** -0.5
    assert A.effective_noise_multiplier([z * r for r in rel]) == pytest.approx(z_eff, rel=1e-12)
    ours = A.dpsgd_epsilon(z, q, t, d, accountant=accountant, relative_noise=rel)
    assert ours == pytest.approx(A.dpsgd_epsilon(z_eff, q, t, d, accountant=accountant), rel=1e-6)


def test_delta_of_event_inverts_epsilon():
    ev = A.dpsgd_event(1.0, 0.02, 100)
    eps = A.epsilon_of_event(ev, 1e-6)
    assert A.delta_of_event(ev, eps) <= 1e-6 * (1 + 1e-6)
    assert A.delta_of_event(ev, eps * 0.9) > 1e-6


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_epsilon_curve_equals_epsilon_of_event(accountant):
    # The accountant composed once and evaluated at several deltas gives epsilon_of_event's
    # values exactly (sampling.truncated_spend evaluates it at a few deltas per spend).
    ev = A.dpsgd_event(1.1, 0.03, 200)
    curve = A.epsilon_curve(ev, accountant=accountant)
    for delta in (1e-5, 1e-5 - 3e-9, 1e-7, 0.2):
        assert curve(delta) == A.epsilon_of_event(ev, delta, accountant=accountant)
    with pytest.raises(ValueError, match="delta"):
        curve(0.0)
    # A second curve of an equal event reuses the composed accountant: same values, and the same
    # as dp-accounting composing afresh.
    again = A.epsilon_curve(A.dpsgd_event(1.1, 0.03, 200), accountant=accountant)
    assert again(1e-5) == curve(1e-5)
    if accountant == "rdp":
        assert again(1e-5) == _direct_rdp(1.1, 0.03, 200, 1e-5)
    # Events equal as values but differing in a float's type (dp-accounting then computes in
    # float32) are different keys (repr), not a shared entry.
    def raw(z):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.03, dp_accounting.GaussianDpEvent(z)), 200)

    assert raw(1.25) == raw(np.float32(1.25))
    assert A.epsilon_curve(raw(1.25))(1e-5) == _direct_rdp(1.25, 0.03, 200, 1e-5)
    assert A.epsilon_curve(raw(np.float32(1.25)))(1e-5) == _direct_rdp(np.float32(1.25), 0.03, 200, 1e-5)


@pytest.mark.parametrize(
    "accountant,sampling,rel",
    [("rdp", "poisson", (1.0,)), ("rdp", "without_replacement", (1.0,)),
     ("pld", "poisson", (1.0,)), ("rdp", "poisson", (1.0, 1.0))],
)
def test_calibration_round_trip(accountant, sampling, rel):
    q, d = 0.02, 1e-5
    t = 20 if accountant == "pld" else 100
    targets = {("rdp", "poisson"): (0.5, 3.0), ("pld", "poisson"): (0.5,)}.get((accountant, sampling), (1.0,))
    for target in targets:
        z = A.calibrate_noise_multiplier(target, d, q, t, accountant=accountant, sampling=sampling,
                                         relative_noise=rel, dataset_size=1000)
        eps = A.dpsgd_epsilon(z, q, t, d, accountant=accountant, sampling=sampling,
                              relative_noise=rel, dataset_size=1000)
        assert eps <= target * (1 + 1e-6)
        assert eps == pytest.approx(target, rel=1e-3)


def test_calibration_two_updates_is_sqrt2_of_one():
    z1 = A.calibrate_noise_multiplier(1.0, 1e-5, 0.02, 50)
    z2 = A.calibrate_noise_multiplier(1.0, 1e-5, 0.02, 50, relative_noise=(1.0, 1.0))
    assert z2 == pytest.approx(math.sqrt(2.0) * z1, rel=1e-4)


def test_pld_refuses_sampling_without_replacement():
    with pytest.raises(ValueError, match="rdp"):
        A.dpsgd_epsilon(1.0, 0.1, 10, 1e-5, accountant="pld", sampling="without_replacement")
    with pytest.raises(ValueError, match="rdp"):
        A.calibrate_noise_multiplier(1.0, 1e-5, 0.1, 10, accountant="pld", sampling="without_replacement")


# ----------------------------------------------------------------------------- zCDP


def test_zcdp_closed_forms():
    assert A.gaussian_rho(2.0, 4.0) == pytest.approx(4.0 / 32.0)
    assert A.gaussian_sigma_for_rho(2.0, A.gaussian_rho(2.0, 4.0)) == pytest.approx(4.0)
    assert A.compose_rho(0.1, 0.2, 0.3) == pytest.approx(0.6)
    assert A.pure_dp_to_rho(2.0) == pytest.approx(2.0)
    rho, d = 0.3, 1e-6
    assert A.zcdp_to_dp(rho, d, method="bun_steinke") == pytest.approx(
        rho + 2 * math.sqrt(rho * math.log(1 / d)), rel=1e-14)


def _cks_grid_min(rho, delta):
    alpha = 1.0 + np.logspace(-6, 7, 400_001)
    L = math.log(1 / delta)
    vals = alpha * rho + (L + (alpha - 1) * np.log1p(-1 / alpha) - np.log(alpha)) / (alpha - 1)
    return max(0.0, float(vals.min()))


@pytest.mark.parametrize("rho", [1e-4, 0.01, 0.125, 1.0, 12.5, 200.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 0.1])
def test_cks_below_bun_steinke_and_equals_grid_min(rho, delta):
    cks = A.zcdp_to_dp(rho, delta)
    bs = A.zcdp_to_dp(rho, delta, method="bun_steinke")
    assert cks <= bs
    grid = _cks_grid_min(rho, delta)
    assert cks <= grid + 1e-12 * max(1.0, grid)
    assert cks == pytest.approx(grid, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("rho,delta", [(0.05, 1e-5), (0.5, 1e-6), (3.0, 1e-8)])
def test_cks_matches_dp_accounting_rdp_of_zcdp_event(rho, delta):
    """dp-accounting's RDP conversion is the same bound at discrete orders: slightly above."""
    acc = dp_accounting.rdp.RdpAccountant(orders=np.linspace(1.02, 200, 20000))
    ref = acc.compose(dp_accounting.ZCDpEvent(rho)).get_epsilon(delta)
    cks = A.zcdp_to_dp(rho, delta)
    assert cks <= ref + 1e-12
    assert cks == pytest.approx(ref, rel=1e-4)


@pytest.mark.parametrize("method", ["cks", "bun_steinke"])
@pytest.mark.parametrize("eps,delta", [(0.1, 1e-5), (1.0, 1e-6), (8.0, 1e-9)])
def test_dp_to_rho_round_trip(method, eps, delta):
    rho = A.dp_to_rho(eps, delta, method=method)
    assert A.zcdp_to_dp(rho, delta, method=method) == pytest.approx(eps, rel=1e-9)
    assert A.zcdp_to_dp(rho * (1 + 1e-6), delta, method=method) > eps
    if method == "cks":
        assert rho >= A.dp_to_rho(eps, delta, method="bun_steinke")


def test_ledger():
    led = A.ZcdpLedger()
    rho, K, T = 0.5, 3, 7
    s2 = np.array([0.5, 0.3, 0.2])
    led.charge("stage1", 0.2 * rho)
    for k in range(K):
        led.charge(f"stage2/group{k}", 0.8 * rho * s2[k] / T, count=T)
    led.assert_total(rho)
    assert led.charges["stage2/group1"] == pytest.approx(0.8 * rho * 0.3)
    assert led.to_dp(1e-5) == pytest.approx(A.zcdp_to_dp(rho, 1e-5))
    with pytest.raises(AssertionError, match="planned"):
        led.assert_total(rho * 1.01)
    with pytest.raises(ValueError, match="rho"):
        led.charge("bad", -1.0)
    spend = led.to_spend(1e-5)
    assert spend.rho == pytest.approx(rho) and spend.accountant == "zcdp"


# ----------------------------------------------------------------------------- analytic Gaussian


def _bw_algorithm1(epsilon, delta, gs=1.0, tol=1e-14):
    """Balle & Wang (2018) Algorithm 1, re-implemented independently (doubling + bisection on v)."""
    phi = special.ndtr  # accurate in the tails, unlike 0.5 * (1 + erf(t / sqrt(2)))
    case_a = lambda s: phi(math.sqrt(epsilon * s)) - math.exp(epsilon) * phi(-math.sqrt(epsilon * (s + 2.0)))  # noqa: E731
    case_b = lambda s: phi(-math.sqrt(epsilon * s)) - math.exp(epsilon) * phi(-math.sqrt(epsilon * (s + 2.0)))  # noqa: E731
    delta0 = case_a(0.0)
    if delta >= delta0:
        f, stop, left = case_a, (lambda s: case_a(s) >= delta), (lambda s: case_a(s) > delta)
        to_alpha = lambda s: math.sqrt(1.0 + s / 2.0) - math.sqrt(s / 2.0)  # noqa: E731
    else:
        f, stop, left = case_b, (lambda s: case_b(s) <= delta), (lambda s: case_b(s) < delta)
        to_alpha = lambda s: math.sqrt(1.0 + s / 2.0) + math.sqrt(s / 2.0)  # noqa: E731
    lo, hi = 0.0, 1.0
    while not stop(hi):
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if abs(f(mid) - delta) <= tol * delta:
            break
        if left(mid):
            hi = mid
        else:
            lo = mid
    return to_alpha(0.5 * (lo + hi)) * gs / math.sqrt(2.0 * epsilon)


def _bw_delta(sigma, eps, sens):
    a, b = sens / (2 * sigma), eps * sigma / sens
    return special.ndtr(a - b) - math.exp(eps) * special.ndtr(-a - b)


@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-5, 1e-2])
def test_analytic_gaussian(eps, delta):
    s = A.analytic_gaussian_sigma(eps, delta)
    # the defining equality of Balle & Wang Thm. 8
    assert _bw_delta(s, eps, 1.0) == pytest.approx(delta, rel=1e-9)
    assert A.analytic_gaussian_delta(s, eps) == pytest.approx(delta, rel=1e-9)
    # their Algorithm 1 (independent re-implementation) and dp-accounting's calibration
    assert s == pytest.approx(_bw_algorithm1(eps, delta), rel=1e-6)
    assert s == pytest.approx(dp_accounting.get_sigma_gaussian(eps, delta), rel=1e-6)
    # linear in the sensitivity
    assert A.analytic_gaussian_sigma(eps, delta, 3.0) == pytest.approx(3.0 * s, rel=1e-9)
    if eps < 1.0:
        assert s < A.classical_gaussian_sigma(eps, delta)


def test_analytic_gaussian_large_epsilon_is_stable():
    for eps in (50.0, 200.0):
        s = A.analytic_gaussian_sigma(eps, 1e-6)
        assert math.log(A.analytic_gaussian_delta(s, eps)) == pytest.approx(math.log(1e-6), abs=1e-8)
    assert A.analytic_gaussian_sigma(200.0, 1e-6) < A.analytic_gaussian_sigma(50.0, 1e-6)


# ----------------------------------------------------------------------------- PrivacySpend


def test_privacy_spend_to_dict_is_json():
    ev = A.dpsgd_event(1.0, 0.1, 10, relative_noise=(1.0, 2.0))
    sp = A.PrivacySpend(2.0, 1e-5, event=ev, unit="sensitive_attribute", accountant="rdp")
    d = json.loads(json.dumps(sp.to_dict()))
    assert d["epsilon"] == 2.0 and d["unit"] == "sensitive_attribute"
    assert d["event"]["class_name"] == "SelfComposedDpEvent" and d["event"]["count"] == 10
    assert d["event"]["event"]["event"]["events"][1]["noise_multiplier"] == 2.0
    with pytest.raises(Exception):
        sp.epsilon = 3.0  # frozen


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: A.dpsgd_epsilon(-1.0, 0.1, 10, 1e-5), "noise_multiplier"),
        (lambda: A.dpsgd_epsilon(1.0, 0.0, 10, 1e-5), "sample_rate"),
        (lambda: A.dpsgd_epsilon(1.0, 1.5, 10, 1e-5), "sample_rate"),
        (lambda: A.dpsgd_epsilon(1.0, 0.1, 0, 1e-5), "steps"),
        (lambda: A.dpsgd_epsilon(1.0, 0.1, 10, 1.0), "delta"),
        (lambda: A.dpsgd_epsilon(1.0, 0.1, 10, 1e-5, accountant="moments"), "accountant"),
        (lambda: A.dpsgd_epsilon(1.0, 0.1, 10, 1e-5, sampling="shuffle"), "sampling"),
        (lambda: A.dpsgd_event(1.0, 0.1, 10, relative_noise=(1.0, -1.0)), "relative_noise"),
        (lambda: A.dpsgd_epsilon(1.0, 0.1, 10, 1e-5, mechanisms_per_step=2, relative_noise=(1.0,)),
         "mechanisms_per_step"),
        (lambda: A.dpsgd_event(1.0, 0.15, 10, sampling="without_replacement", dataset_size=7), "sample_rate"),
        (lambda: A.calibrate_noise_multiplier(0.0, 1e-5, 0.1, 10), "epsilon"),
        (lambda: A.gaussian_rho(1.0, 0.0), "sigma"),
        (lambda: A.gaussian_sigma_for_rho(1.0, 0.0), "rho"),
        (lambda: A.compose_rho(0.1, -0.2), "rho"),
        (lambda: A.pure_dp_to_rho(-1.0), "epsilon"),
        (lambda: A.zcdp_to_dp(0.1, 0.0), "delta"),
        (lambda: A.zcdp_to_dp(0.1, 1e-5, method="rdp"), "method"),
        (lambda: A.dp_to_rho(0.0, 1e-5), "epsilon"),
        (lambda: A.analytic_gaussian_sigma(1.0, 1.5), "delta"),
        (lambda: A.classical_gaussian_sigma(2.0, 1e-5), "epsilon"),
        (lambda: A.PrivacySpend(1.0, 1e-5, relation="swap"), "relation"),
        (lambda: A.PrivacySpend(1.0, 1e-5, unit="row"), "unit"),
        (lambda: A.PrivacySpend(-1.0, 1e-5), "epsilon"),
    ],
)
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def test_membership_visible_delta_matches_dp_accounting_pld():
    """sum_k Bin(k; T, q) delta_G(eps; sqrt(k) mu) against dp-accounting's PLD of a k-fold
    Gaussian, term by term (small T so every k is a separate PLD)."""
    from dp_accounting.pld import privacy_loss_distribution as pld
    from scipy import stats

    T, q, mu = 12, 0.2, 0.8
    part = A.participation_distribution(T, "poisson", sample_rate=q)
    plds = [pld.from_gaussian_mechanism(1.0 / (mu * math.sqrt(k)), value_discretization_interval=1e-3)
            for k in range(1, T + 1)]
    for eps in (0.5, 2.0, 4.0):
        ref = sum(stats.binom.pmf(k, T, q) * d.get_delta_for_epsilon(eps) for k, d in enumerate(plds, 1))
        assert A.membership_visible_delta(eps, mu, part) == pytest.approx(ref, rel=1e-2, abs=1e-12)


def test_membership_visible_full_participation_is_the_composed_gaussian():
    """q = 1 (and shuffling, one participation per epoch): T Gaussians of shift mu compose to one
    of shift sqrt(T) mu; the epsilon equals the analytic Gaussian's at sensitivity sqrt(T) mu."""
    T, mu, delta = 9, 0.3, 1e-6
    full = A.participation_distribution(T, "poisson", sample_rate=1.0)
    shuffled = A.participation_distribution(T * 4, "shuffle", steps_per_epoch=4)
    want = A.analytic_gaussian_delta(1.0, 1.0, math.sqrt(T) * mu)
    assert A.membership_visible_delta(1.0, mu, full) == pytest.approx(want, rel=1e-9)
    assert A.membership_visible_delta(1.0, mu, shuffled) == pytest.approx(want, rel=1e-9)
    eps = A.membership_visible_epsilon(mu, delta, full)
    assert A.analytic_gaussian_sigma(eps, delta, math.sqrt(T) * mu) == pytest.approx(1.0, rel=1e-6)
    # calibration inverts epsilon, and an extra release (extra_mu) costs budget
    part = A.participation_distribution(500, "poisson", sample_rate=0.02)
    m = A.calibrate_membership_visible(2.0, 1e-5, part)
    assert A.membership_visible_epsilon(m, 1e-5, part) == pytest.approx(2.0, rel=1e-6)
    assert A.calibrate_membership_visible(2.0, 1e-5, part, extra_mu=0.1) < m
    with pytest.raises(ValueError, match="alone exceeds"):
        A.calibrate_membership_visible(0.1, 1e-5, part, extra_mu=5.0)


def test_calibrate_with_extra_event_composes_it():
    import dp_accounting

    extra = dp_accounting.GaussianDpEvent(20.0)
    z0 = A.calibrate_noise_multiplier(1.0, 1e-5, 0.01, 500)
    z1 = A.calibrate_noise_multiplier(1.0, 1e-5, 0.01, 500, extra_event=extra)
    assert z1 > z0
    ev = dp_accounting.ComposedDpEvent([extra, A.dpsgd_event(z1, 0.01, 500)])
    assert A.epsilon_of_event(ev, 1e-5) <= 1.0 + 1e-6


# ----------------------------------------------------------------------------- array-valued zCDP

_RHO_GRID = np.array([[0.01, 0.1, 0.5], [1.0, 2.0, 0.1]])
_DELTAS = np.array([1e-5, 1e-7, 1e-5])


@pytest.mark.parametrize("method", A.ZCDP_METHODS)
def test_zcdp_conversions_elementwise_equal_the_scalar_path(method):
    eps = A.zcdp_to_dp(_RHO_GRID, _DELTAS, method=method)
    assert isinstance(eps, np.ndarray) and eps.shape == (2, 3) and eps.dtype == np.float64
    for i in np.ndindex(eps.shape):
        assert eps[i] == A.zcdp_to_dp(float(_RHO_GRID[i]), float(_DELTAS[i[1]]), method=method)
    rho = A.dp_to_rho(eps, _DELTAS, method=method)
    for i in np.ndindex(rho.shape):
        assert rho[i] == A.dp_to_rho(float(eps[i]), float(_DELTAS[i[1]]), method=method)
    np.testing.assert_allclose(rho, _RHO_GRID, rtol=1e-8)
    # scalars stay Python floats
    assert type(A.zcdp_to_dp(0.1, 1e-5, method=method)) is float
    assert type(A.dp_to_rho(1.0, 1e-5, method=method)) is float


def test_rho_algebra_elementwise_equal_the_scalar_path():
    sens, sig = np.array([1.0, 2.0, 0.5]), np.array([[1.5], [3.0]])
    r = A.gaussian_rho(sens, sig)
    assert r.shape == (2, 3)
    for i, j in np.ndindex(r.shape):
        assert r[i, j] == A.gaussian_rho(float(sens[j]), float(sig[i, 0]))
    s = A.gaussian_sigma_for_rho(sens, _RHO_GRID)
    for i, j in np.ndindex(s.shape):
        assert s[i, j] == A.gaussian_sigma_for_rho(float(sens[j]), float(_RHO_GRID[i, j]))
    c = A.compose_rho(_RHO_GRID, 0.1, np.array([1e-17, 0.2, 0.3]))
    for i, j in np.ndindex(c.shape):
        assert c[i, j] == A.compose_rho(float(_RHO_GRID[i, j]), 0.1, [1e-17, 0.2, 0.3][j])
    assert A.compose_rho(1.0, 1e-17) == math.fsum([1.0, 1e-17])  # exact rounding kept
    p = A.pure_dp_to_rho(np.array([0.5, 2.0]))
    assert p.tolist() == [A.pure_dp_to_rho(0.5), A.pure_dp_to_rho(2.0)]
    assert type(A.gaussian_rho(1.0, 2.0)) is float and type(A.compose_rho(0.1, 0.2)) is float


@pytest.mark.parametrize("call,field", [
    (lambda: A.zcdp_to_dp(np.array([0.1, -0.1]), 1e-5), "rho"),
    (lambda: A.zcdp_to_dp(np.array([0.1, 0.2]), np.array([1e-5, 1.0])), "delta"),
    (lambda: A.dp_to_rho(np.array([1.0, 0.0]), 1e-5), "epsilon"),
    (lambda: A.gaussian_sigma_for_rho(1.0, np.array([0.1, 0.0])), "rho"),
    (lambda: A.compose_rho(np.zeros(2) + 0.1, np.zeros(3) + 0.1), "broadcast"),
])
def test_array_zcdp_bad_input(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def test_array_ledger_totals_and_conversion_per_grid_point():
    rhos = np.array([0.1, 0.4, 1.0])  # one budget per grid point
    led = A.ZcdpLedger()
    led.charge("step", 0.25 * rhos, count=2)
    led.charge("counts", 0.05)  # a scalar charge counts at every point
    led.charge("final", 0.5 * rhos)
    assert led.shape == (3,)
    total = led.total
    for j in range(3):
        scalar = A.ZcdpLedger()
        scalar.charge("step", 0.25 * float(rhos[j]), count=2)
        scalar.charge("counts", 0.05)
        scalar.charge("final", 0.5 * float(rhos[j]))
        assert total[j] == scalar.total
        assert led.charges["counts"][j] == 0.05
        assert led.to_dp(1e-5)[j] == scalar.to_dp(1e-5)
        assert led.at(j).to_spend(1e-5) == scalar.to_spend(1e-5)
    led.assert_total(rhos + 0.05)
    with pytest.raises(AssertionError, match="planned"):
        led.assert_total(rhos + np.array([0.05, 0.05, 0.06]))
    with pytest.raises(ValueError, match="broadcast"):
        led.charge("bad", np.ones(4))
    with pytest.raises(ValueError, match="rho"):
        led.charge("bad", np.array([0.1, -0.1, 0.2]))
    with pytest.raises(ValueError, match="grid point"):
        led.to_spend(1e-5)
    # a [2, 1] charge broadcasts the ledger to [2, 3]
    led.charge("per_row", np.array([[0.1], [0.2]]))
    assert led.shape == (2, 3) and led.total.shape == (2, 3)
    assert led.total[1, 2] == math.fsum([0.25 * 1.0 * 2, 0.05, 0.5 * 1.0, 0.2])


@pytest.mark.parametrize("eps,delta,sens", [(0.05, 1e-5, 1.0), (1.0, 1e-6, 2.5), (20.0, 1e-9, 0.3)])
def test_analytic_gaussian_epsilon_inverts_the_calibration(eps, delta, sens):
    sigma = A.analytic_gaussian_sigma(eps, delta, sens)
    got = A.analytic_gaussian_epsilon(sigma, delta, sens)
    assert got == pytest.approx(eps, rel=1e-9)
    # Balle & Wang's delta at the returned epsilon is the target's (the definition, evaluated apart)
    a, b = sens / (2 * sigma), got * sigma / sens
    d = special.ndtr(a - b) - math.exp(got) * special.ndtr(-a - b)
    assert d == pytest.approx(delta, rel=1e-6)
    assert A.analytic_gaussian_epsilon(sigma * 1.01, delta, sens) < got
    assert A.analytic_gaussian_epsilon(1e6, 1e-5) == 1e-12
    with pytest.raises(ValueError, match="sigma"):
        A.analytic_gaussian_epsilon(0.0, 1e-5)


def test_relations_as_names_or_enums_recorded_by_name():
    sp = A.PrivacySpend(epsilon=1.0, delta=1e-5, relation=NR.REPLACE_ONE)
    assert sp.relation == "replace_one" and sp.to_dict()["relation"] == "replace_one"
    with pytest.raises(ValueError, match="swap"):
        A.PrivacySpend(epsilon=1.0, delta=1e-5, relation="swap")
    ev = A.dpsgd_event(1.1, 0.01, 100)
    assert A.epsilon_of_event(ev, 1e-5, relation=NR.ADD_OR_REMOVE_ONE) == A.epsilon_of_event(
        ev, 1e-5, relation="add_remove")
