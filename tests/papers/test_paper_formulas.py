"""Tests of the papers' closed forms (algorithms.fermi.theory, budget_tailoring.formulas,
reductions.theory): hand computations, golden values, identities."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dpfair_jax.privacy import accounting as A
import types

from dpfair_jax.algorithms.fermi import theory as fermi_theory
from dpfair_jax.algorithms.budget_tailoring import formulas as bt_formulas
from dpfair_jax.algorithms.reductions import theory as reductions_theory
from dpfair_jax.privacy import relations as R

P = types.SimpleNamespace(**{n: getattr(m, n) for m in (fermi_theory, bt_formulas, reductions_theory)
                             for n in m.__all__})

# ----------------------------------------------------------------------------- paper 004

# notes/dp_fermi_004.md II.6, "worked values" (200 epochs, batch 1024, L = C = 5)
GOLDEN = {
    "parkinsons": dict(n=4406, rho=0.318, steps=1000,
                       std_w=(0.417, 0.209, 0.070, 0.023), std_t=(10.43, 5.22, 1.74, 0.58)),
    "adult": dict(n=33916, rho=0.325, steps=6800,
                  std_w=(0.156, 0.078, 0.026, 0.0087), std_t=(3.90, 1.95, 0.65, 0.22)),
}
EPS = (0.5, 1.0, 3.0, 9.0)


def _half_ulp(x: float) -> float:
    """Half a unit in the last printed digit of a golden value."""
    s = f"{x}"
    decimals = len(s.split(".")[1]) if "." in s else 0
    return 0.5 * 10.0**-decimals


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_official_calibration_golden_values(name):
    g = GOLDEN[name]
    n, rho = g["n"], g["rho"]
    min_count = int(round(rho * n)) + 1  # rho = (min count - 1) / n
    for eps, sw, st in zip(EPS, g["std_w"], g["std_t"]):
        cal = P.official_dpfermi_calibration(n, min_count, 200, 1024, eps)
        assert cal.steps == g["steps"]
        assert cal.delta == pytest.approx(1.0 / n**2)
        assert cal.rho == pytest.approx(rho, abs=1.0 / n)
        # the rounding of the printed value, plus 0.5 % for rho being given to 3 digits
        assert cal.std_w == pytest.approx(sw, abs=_half_ulp(sw) + 0.005 * sw)
        assert cal.std_theta == pytest.approx(st, abs=_half_ulp(st) + 0.005 * st)
        assert cal.std_theta == pytest.approx(25.0 * cal.std_w, rel=1e-12)  # L * C


def test_official_calibration_infinite_epsilon_is_noiseless():
    cal = P.official_dpfermi_calibration(1000, 300, 2, 100, math.inf)
    assert (cal.std_theta, cal.std_w) == (0.0, 0.0) and cal.steps == 20


def _recipe_sigma(delta_avg, q, T, delta, eps):
    """sigma^2 = 2 Delta_avg^2 q^2 T ln(1/delta) / eps^2 (notes II.6)."""
    return math.sqrt(2.0 * delta_avg**2 * q**2 * T * math.log(1 / delta) / eps**2)


def test_theorem33_is_the_moments_recipe_with_the_proof_sensitivities():
    n, m, T, eps, delta, rho, L, D, ell = 5000, 250, 800, 0.7, 1e-6, 0.2, 2.0, 3.0, 3
    q = m / n
    kw = dict(lipschitz_theta=L, w_bound=D, num_classes=ell, composition="paper", batch_size=m)
    s = P.dpfermi_noise(eps, delta, n, T, rho, **kw)
    d_theta2, d_w2 = 8 * D**2 * L**2 / (m**2 * rho), 8 / (m**2 * rho)
    assert s.sigma_theta == pytest.approx(_recipe_sigma(math.sqrt(d_theta2), q, T, delta, eps), rel=1e-12)
    assert s.sigma_w == pytest.approx(_recipe_sigma(math.sqrt(d_w2), q, T, delta, eps), rel=1e-12)
    a = P.dpfermi_noise(eps, delta, n, T, rho, privacy="all_features", **kw)
    dt_all2 = 4 * L**2 * ell**2 * D**2 / m**2 + 2 * d_theta2
    dw_all2 = 2 * d_w2 + 16 * D**2 / m**2
    assert a.sigma_theta == pytest.approx(_recipe_sigma(math.sqrt(dt_all2), q, T, delta, eps), rel=1e-12)
    assert a.sigma_w == pytest.approx(_recipe_sigma(math.sqrt(dw_all2), q, T, delta, eps), rel=1e-12)
    # z of the recipe
    z = P.moments_accountant_noise_multiplier(eps, delta, q, T)
    assert s.sigma_w == pytest.approx(z * math.sqrt(d_w2), rel=1e-12)


@pytest.mark.parametrize("D", [0.5, 1.0, 5.0])
@pytest.mark.parametrize("ell", [1, 2, 9])
@pytest.mark.parametrize("rho", [0.05, 0.5, 1.0])
def test_statement_is_at_least_the_proof(D, ell, rho):
    kw = dict(lipschitz_theta=1.5, w_bound=D, num_classes=ell, privacy="all_features")
    proof = P.dpfermi_noise(1.0, 1e-5, 1000, 100, rho, **kw)
    stmt = P.dpfermi_noise(1.0, 1e-5, 1000, 100, rho, theta_formula="statement", **kw)
    assert stmt.sigma_theta >= proof.sigma_theta
    assert stmt.sigma_w == proof.sigma_w
    # hand computation of the statement
    base = 100 * math.log(1e5) / 1000**2
    want = 64 * 1.5**2 * D**2 * base / rho + 32 * D**4 * 1.5**2 * ell**2 * base
    assert P.dpfermi_noise(1.0, 1e-5, 1000, 100, rho, theta_formula="statement", composition="paper",
                           **kw).sigma_theta == pytest.approx(math.sqrt(want), rel=1e-12)


def test_joint_composition_doubles_variances_and_meets_epsilon_with_the_accountant():
    n, m, T, eps, delta = 4406, 1024, 1000, 1.0, 1 / 4406**2
    kw = dict(lipschitz_theta=5.0, w_bound=5.0)
    paper = P.dpfermi_noise(eps, delta, n, T, 0.318, composition="paper", **kw)
    joint = P.dpfermi_noise(eps, delta, n, T, 0.318, **kw)
    assert joint.sigma_theta == pytest.approx(math.sqrt(2) * paper.sigma_theta, rel=1e-12)
    assert joint.sigma_w == pytest.approx(math.sqrt(2) * paper.sigma_w, rel=1e-12)
    # both updates share one Poisson batch: two Gaussians per step with the recipe's z * sqrt 2
    z_joint = math.sqrt(2) * P.moments_accountant_noise_multiplier(eps, delta, m / n, T)
    eps_rdp = A.dpsgd_epsilon(z_joint, m / n, T, delta, relative_noise=(1.0, 1.0))
    assert eps_rdp <= eps


def test_dpsgda_theorem_e1():
    n, T, eps, delta, Lt, Lw = 2000, 400, 2.0, 1e-5, 3.0, 0.5
    s = P.dpsgda_noise(eps, delta, n, T, lipschitz_theta=Lt, lipschitz_w=Lw, composition="paper")
    assert s.sigma_theta == pytest.approx(math.sqrt(8 * T * Lt**2 * math.log(1 / delta) / (eps**2 * n**2)))
    assert s.sigma_w == pytest.approx(math.sqrt(8 * T * Lw**2 * math.log(1 / delta) / (eps**2 * n**2)))
    m = 100  # recipe with Delta = 2 L / m
    assert s.sigma_theta == pytest.approx(_recipe_sigma(2 * Lt / m, m / n, T, delta, eps), rel=1e-12)
    j = P.dpsgda_noise(eps, delta, n, T, lipschitz_theta=Lt, lipschitz_w=Lw)
    assert j.sigma_w == pytest.approx(math.sqrt(2) * s.sigma_w)


def test_fermi_assumptions():
    assert P.dpfermi_min_steps(4406, 1024, 9.0) == math.ceil((4406 * 3 / 2048) ** 2)
    with pytest.raises(ValueError, match="T_min"):
        P.dpfermi_noise(1.0, 1e-5, 10000, 10, 0.3, lipschitz_theta=1, w_bound=1, batch_size=10)
    with pytest.raises(ValueError, match="2 ln"):
        P.dpfermi_noise(30.0, 1e-5, 100, 10, 0.3, lipschitz_theta=1, w_bound=1)
    P.dpfermi_noise(30.0, 1e-5, 100, 10, 0.3, lipschitz_theta=1, w_bound=1, check_assumptions=False)
    with pytest.raises(ValueError, match="privacy"):
        P.dpfermi_noise(1.0, 1e-5, 100, 10, 0.3, lipschitz_theta=1, w_bound=1, privacy="labels")
    with pytest.raises(ValueError, match="rho"):
        P.dpfermi_noise(1.0, 1e-5, 100, 10, 1.5, lipschitz_theta=1, w_bound=1)


# ----------------------------------------------------------------------------- paper 000


def test_budget_split_and_stage1():
    tau, mu = P.budget_tailoring_split(0.5)
    assert (tau, mu) == pytest.approx((0.1, 0.4))
    b = P.stage1_budgets(tau, 4)
    assert b.tau_k == pytest.approx(0.1 / 5)
    assert b.tau_xx + b.tau_xy + 4 * b.tau_se == pytest.approx(tau)
    U, Dl = 1.5, 2.0
    s = P.stage1_noise_stds(tau, 4, stat_sensitivity=U**2, se_sensitivity=Dl**2)
    assert s.std_xx == pytest.approx(U**2 / math.sqrt(b.tau_k))  # notes A.1: U^2 / sqrt(tau_k)
    assert s.std_xy == pytest.approx(U**2 / math.sqrt(b.tau_k))
    assert s.std_se**2 == pytest.approx(Dl**4 / (2 * b.tau_k))  # Alg. 1 line 17


def test_stage2_group_weighted_stds():
    mu, T, Dl = 0.4, 50, 2.0
    s = np.array([3.0, 1.0, 0.5])
    s = s / np.sqrt(np.sum(s**2))
    st = P.stage2_noise_stds(mu, s, T, grad_sensitivity=Dl, loss_sensitivity=Dl**2)
    np.testing.assert_allclose(st.grad_std**2, T * Dl**2 / (mu * s**2), rtol=1e-12)
    np.testing.assert_allclose(st.loss_std**2, T * Dl**4 / (mu * s**2), rtol=1e-12)
    st3 = P.stage2_noise_stds(mu, s, T, grad_sensitivity=Dl, algorithm=3)
    np.testing.assert_allclose(st3.grad_std**2, T * Dl**2 / (2 * mu * s**2), rtol=1e-12)
    assert st3.loss_std is None
    # groups with a larger SE get less noise; total variance >= equal split (Cauchy-Schwarz)
    assert np.all(np.diff(st3.grad_std) > 0)
    assert np.sum(st3.grad_std**2) >= len(s) ** 2 * T * Dl**2 / (2 * mu)
    np.testing.assert_allclose(P.stage2_group_budgets(mu, s, T), mu * s**2 / (2 * T))
    with pytest.raises(ValueError, match="sum_k s_k"):
        P.stage2_group_budgets(mu, [1.0, 1.0], T)
    with pytest.raises(ValueError, match="loss_sensitivity"):
        P.stage2_noise_stds(mu, s, T, grad_sensitivity=Dl)


def test_dpnose_variants():
    rho, T, K, Dl = 0.5, 40, 4, 1.0
    pooled = P.dpnose_noise_stds(rho, T, K, grad_sensitivity=Dl)
    assert pooled.shape == (1,) and pooled[0] ** 2 == pytest.approx(T * Dl**2 / (2 * rho))
    eq = P.dpnose_noise_stds(rho, T, K, grad_sensitivity=Dl, variant="equal_split")
    np.testing.assert_allclose(eq**2, T * Dl**2 * K / (2 * rho))
    assert np.sum(eq**2) == pytest.approx(K**2 * pooled[0] ** 2)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("algorithm", [2, 3])
def test_ledger_adds_up_to_rho(seed, algorithm):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 7))
    s = rng.uniform(0.1, 2.0, K)
    s /= np.sqrt(np.sum(s**2))
    rho = float(rng.uniform(0.01, 10.0))
    T = int(rng.integers(1, 60))
    led = P.budget_tailoring_ledger(rho, s, T, algorithm=algorithm)
    led.assert_total(rho, rtol=1e-12)
    assert sum(c for _, _, c in led.history) == 2 + K + K * T * (2 if algorithm == 2 else 1)
    assert len(led.history) == 2 + K + K * (2 if algorithm == 2 else 1)


def test_sensitivity_helpers_against_brute_force():
    rng = np.random.default_rng(0)
    U = 1.7
    x = rng.normal(size=(2000, 5))
    x = U * x / np.linalg.norm(x, axis=1, keepdims=True)
    xp = rng.normal(size=(2000, 5))
    xp = U * xp / np.linalg.norm(xp, axis=1, keepdims=True)
    diffs = np.linalg.norm(np.einsum("ni,nj->nij", x, x) - np.einsum("ni,nj->nij", xp, xp), axis=(1, 2))
    assert diffs.max() <= R.gram_sensitivity(U).under("replace_one") + 1e-12
    assert diffs.max() >= 0.98 * R.gram_sensitivity(U).under("replace_one")  # attained at orthogonal rows
    assert R.gram_sensitivity(U).under("add_remove") == pytest.approx(U**2)
    assert R.clipped_sum_sensitivity(2.0).under("replace_one") == 4.0
    assert R.bounded_sum_sensitivity(0.0, 4.0).under("replace_one") == 4.0
    assert R.bounded_sum_sensitivity(-1.0, 3.0).under("add_remove") == 3.0


# ----------------------------------------------------------------------------- paper 002


def test_advanced_composition_hand_value():
    e, k, db = 0.1, 10, 1e-6
    want = e * math.sqrt(2 * k * math.log(1 / db)) + k * e * (math.exp(e) - 1)
    assert P.advanced_composition_epsilon(e, k, db) == pytest.approx(want, rel=1e-14)
    assert P.advanced_composition(e, 1e-7, k, db) == pytest.approx((want, 10 * 1e-7 + 1e-6))


@pytest.mark.parametrize("eps", [0.1, 0.5, 0.99])
@pytest.mark.parametrize("T", [1, 10, 1000])
@pytest.mark.parametrize("oracle", ["pure", "approximate"])
def test_cgoo_per_step_budgets(eps, T, oracle):
    delta = 1e-5
    db = delta if oracle == "pure" else delta / 2
    e_exact, d_step = P.cgoo_per_step_privacy(eps, delta, T, oracle=oracle)
    assert d_step == (0.0 if oracle == "pure" else delta / (2 * T))
    assert P.advanced_composition_epsilon(e_exact, T, db) == pytest.approx(eps, rel=1e-9)
    assert P.advanced_composition_epsilon(e_exact, T, db) <= eps * (1 + 1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the corollary holds for eps < 1
        e_cf, _ = P.cgoo_per_step_privacy(eps, delta, T, oracle=oracle, variant="closed_form")
        e_pp, _ = P.cgoo_per_step_privacy(eps, delta, T, oracle=oracle, variant="paper")
    assert e_cf == pytest.approx(eps / (2 * math.sqrt(2 * T * math.log(1 / db))), rel=1e-14)
    assert P.advanced_composition_epsilon(e_cf, T, db) <= eps
    assert e_pp <= e_cf <= e_exact
    if oracle == "pure":
        assert e_pp == e_cf
    else:  # line 7: log(2 / delta') with delta' = delta / (2T)
        assert e_pp == pytest.approx(eps / (2 * math.sqrt(2 * T * math.log(2 / (delta / (2 * T))))))


def test_cgoo_closed_form_warns_outside_its_range():
    with pytest.warns(UserWarning, match="variant='exact'"):
        P.cgoo_per_step_privacy(100.0, 0.5, 1, oracle="pure", variant="closed_form")


def test_jagielski_per_step():
    assert P.jagielski_per_step_epsilon(1.0, 1e-5, 100) == pytest.approx(1 / (4 * math.sqrt(100 * math.log(1e5))))


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: P.budget_tailoring_split(0.0), "rho"),
        (lambda: P.budget_tailoring_split(1.0, 1.5), "tau_fraction"),
        (lambda: P.stage1_budgets(1.0, 0), "num_groups"),
        (lambda: P.stage2_group_budgets(1.0, [1.0], 5, algorithm=4), "algorithm"),
        (lambda: P.cgoo_per_step_privacy(1.0, 1e-5, 10, oracle="lopt"), "oracle"),
        (lambda: P.cgoo_per_step_privacy(1.0, 1e-5, 10, variant="tight"), "variant"),
        (lambda: P.advanced_composition_epsilon(1.0, 10, 0.0), "delta_bar"),
        (lambda: P.official_dpfermi_calibration(100, 1, 1, 10, 1.0), "min_group_count"),
        (lambda: P.dpnose_noise_stds(1.0, 10, 2, grad_sensitivity=1.0, variant="x"), "variant"),
        (lambda: R.as_relation("swap"), "relation"),
    ],
)
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
