"""Empirical privacy audits of the training mechanisms (dpfair_jax.audit.mechanism_audits).

Each audit runs the real public code in a distinguishing game and checks: the bug-free mechanism's
Clopper-Pearson lower bound (95%) does not exceed the epsilon the kit's accountant claims, and
the same game on a deliberately broken variant reports a bound above it (power). Keys are fixed,
so the outcomes are deterministic; the margins were chosen so a different key would also pass
(the bug-free bounds sit far below the claims, the broken ones far above).
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from dpfair_jax import audit
from dpfair_jax.audit import mechanism_audits as MA
from dpfair_jax.audit.games import AUDIT_COLUMNS


def _check_rows(rows, family, bugs):
    assert [r["planted_bug"] for r in rows] == [b or "none" for b in bugs]
    for r in rows:
        assert set(AUDIT_COLUMNS) <= set(r)
        assert r["mechanism"] == family
        assert np.isfinite(r["claimed_epsilon"]) and r["claimed_epsilon"] > 0
        if r["planted_bug"] == "none":
            assert r["epsilon_lower_bound"] <= r["claimed_epsilon"], r
        else:
            assert r["epsilon_lower_bound"] > r["claimed_epsilon"], r
        assert r["passed"]
    json.dumps(rows)  # rows are plain JSON


def test_group_weighted_aggregation_audit():
    rows = MA.audit_family_variants(jax.random.key(11), "group_weighted", num_trials=3000)
    _check_rows(rows, "group_weighted", (None, "noise", "clipping"))
    assert rows[0]["claimed_epsilon"] == 1.0 and rows[0]["relation"] == "add_remove"


def test_dpsgd_gradient_canary_audit():
    rows = MA.audit_family_variants(jax.random.key(12), "dpsgd", (None, "noise"), num_trials=3000)
    _check_rows(rows, "dpsgd", (None, "noise"))
    # the claim is the kit's own accountant for this run (Poisson q = 1/2, 4 steps, RDP)
    from dpfair_jax.algorithms import dpsgd

    spend = dpsgd.privacy(2.0, n=64, batch_size=32, delta=1e-5, steps=4)
    assert rows[0]["delta"] == pytest.approx(spend.delta) and spend.delta < 1.1e-5
    assert rows[0]["claimed_epsilon"] == pytest.approx(spend.epsilon)


def test_dpsgd_fixed_size_batches_replace_one_audit():
    rows = MA.audit_family_variants(jax.random.key(19), "dpsgd_replace", num_trials=4000)
    _check_rows(rows, "dpsgd_replace", (None, "noise"))
    from dpfair_jax.algorithms import dpsgd

    spend = dpsgd.privacy(6.0, n=64, batch_size=32, delta=1e-5, steps=4, sampling="fixed_size")
    assert rows[0]["claimed_epsilon"] == pytest.approx(spend.epsilon)
    assert rows[0]["relation"] == "replace_one"


def test_fermi_all_features_audit_catches_literal_w_noise():
    """Algorithm 1 line 6 as printed (W-noise not scaled with lam) at lam = 4 is caught."""
    rows = MA.audit_family_variants(jax.random.key(13), "fermi_all", (None, "paper_w_noise"),
                                    num_trials=20000)
    _check_rows(rows, "fermi_all", (None, "paper_w_noise"))
    assert rows[1]["epsilon_lower_bound"] > rows[1]["claimed_epsilon"] + 0.5


def test_stratified_coinpress_audit():
    rows = MA.audit_family_variants(jax.random.key(17), "stratified_coinpress", num_trials=20000)
    _check_rows(rows, "stratified_coinpress", (None, "noise"))
    from dpfair_jax.algorithms import mean_estimation as me

    assert rows[0]["claimed_epsilon"] == pytest.approx(me.stratified_privacy((0.0125, 0.0375), 2, 1e-5).epsilon)
    assert rows[0]["relation"] == "replace_one"


def test_exponential_sampling_audit_is_nearly_tight():
    """Two candidates swapped by one record: the best threshold test sees a likelihood ratio of
    exactly e^(eps/2) (closed form), so the bound must sit just below eps/2 = 0.5."""
    rows = MA.audit_family_variants(jax.random.key(18), "exponential_sampling", num_trials=20000)
    _check_rows(rows, "exponential_sampling", (None, "sensitivity"))
    assert 0.3 < rows[0]["epsilon_lower_bound"] <= 0.5


def test_budget_tailoring_stage2_release_audit():
    """One stage-2 noisy group release (paper 000), add/remove of a canary in the smallest group;
    the claim is the ledger's stage-2 rho converted with the kit's zcdp_to_dp."""
    rows = MA.audit_family_variants(jax.random.key(20), "budget_tailoring",
                                    num_trials=MA.SUITE_TRIALS["quick"]["budget_tailoring"])
    _check_rows(rows, "budget_tailoring", (None, "noise"))
    from dpfair_jax.privacy.accounting import zcdp_to_dp

    # rho = 0.0625, tau_fraction = 0.2, T = 1: the release spends mu = 0.05
    assert rows[0]["claimed_epsilon"] == pytest.approx(zcdp_to_dp(0.05, 1e-5))
    assert rows[0]["relation"] == "add_remove"
    assert rows[1]["epsilon_lower_bound"] > rows[1]["claimed_epsilon"] + 1.0


def test_budget_tailoring_stage1_release_audit():
    """Stage 1 (paper 000, Algorithm 1): add/remove of a canary whose squared residual sits at the
    clip bound in group 0; the claim is that group's SE release, tau / (K + 1), via zcdp_to_dp."""
    rows = MA.audit_family_variants(jax.random.key(22), "budget_tailoring_stage1",
                                    num_trials=MA.SUITE_TRIALS["quick"]["budget_tailoring_stage1"])
    _check_rows(rows, "budget_tailoring_stage1", (None, "noise"))
    from dpfair_jax.algorithms import budget_tailoring as bt
    from dpfair_jax.privacy.accounting import zcdp_to_dp

    # rho = 0.75, tau_fraction = 0.2, K = 2: tau_k = 0.15 / 3 = 0.05, the ledger's stage1/se[0]
    led = bt.budget_ledger(0.75, [0.6, 0.8], config=bt.Config(steps=1), tau_fraction=0.2)
    assert float(led.charges["stage1/se[0]"]) == pytest.approx(0.05)
    assert rows[0]["claimed_epsilon"] == pytest.approx(zcdp_to_dp(0.05, 1e-5))
    assert rows[0]["relation"] == "add_remove"
    assert rows[1]["epsilon_lower_bound"] > rows[1]["claimed_epsilon"] + 1.0


def test_output_perturbation_audit():
    """Paper 001's output perturbation under replace-one (the canary's label flips)."""
    rows = MA.audit_family_variants(jax.random.key(21), "output_perturbation",
                                    num_trials=MA.SUITE_TRIALS["quick"]["output_perturbation"])
    _check_rows(rows, "output_perturbation", (None, "noise"))
    assert rows[0]["claimed_epsilon"] == 1.0 and rows[0]["relation"] == "replace_one"
    _, info = MA.output_perturbation_mechanism()
    # the canary moves the minimizer by close to half the worst-case sensitivity 2 L / (n reg)
    assert info["sensitivity"] == pytest.approx(0.2)
    assert 0.4 * info["sensitivity"] < info["shift"] <= 0.5 * info["sensitivity"]
    from dpfair_jax.algorithms import output_perturbation as op

    assert info["std"] == pytest.approx(op.noise_std(1.0, 1e-5, info["sensitivity"]))


@pytest.mark.slow
def test_fermi_sensitive_attribute_audit():
    rows = MA.audit_family_variants(jax.random.key(14), "fermi_sensitive", num_trials=20000)
    _check_rows(rows, "fermi_sensitive", (None, "noise"))
    assert rows[0]["relation"] == "add_remove"


@pytest.mark.slow
@pytest.mark.parametrize("family", ["group_weighted", "dpsgd", "fermi_all", "stratified_coinpress",
                                    "budget_tailoring", "budget_tailoring_stage1", "output_perturbation"])
def test_all_bugs_caught(family):
    rows = MA.audit_family_variants(jax.random.key(15), family,
                                    num_trials=MA.SUITE_TRIALS["quick"][family])
    _check_rows(rows, family, (None,) + MA.FAMILY_BUGS[family])


@pytest.mark.slow
def test_run_audit_with_mechanisms(tmp_path):
    df = audit.run_audit(quick=True, out=tmp_path, mechanisms=True)
    assert len(df) == 6 + sum(1 + len(b) for b in MA.FAMILY_BUGS.values())
    assert df.passed.all()
    assert len(json.loads((tmp_path / "audit.json").read_text())) == len(df)


def test_single_variant_matches_audit_mechanism_contract():
    row = MA.audit_family(jax.random.key(16), "group_weighted", bug="clipping", num_trials=1000)
    assert row["planted_bug"] == "clipping" and row["passed"]
    assert row["epsilon_lower_bound"] > row["claimed_epsilon"]


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: MA.audit_family_variants(jax.random.key(0), "nope"), "family"),
        (lambda: MA.audit_family_variants(jax.random.key(0), "dpsgd", ("paper_w_noise",)), "bug"),
        (lambda: MA.audit_family_variants(jax.random.key(0), "dpsgd", num_trials=2), "num_trials"),
        (lambda: MA.audit_family_variants(jax.random.key(0), "dpsgd", confidence=1.5), "confidence"),
        (lambda: MA.audit_family_variants(jax.random.key(0), "dpsgd", ()), "bugs"),
        (lambda: MA.group_weighted_mechanism(epsilon=-1.0), "epsilon"),
        (lambda: MA.dpsgd_mechanism(delta=2.0), "delta"),
        (lambda: MA.fermi_mechanism("everything"), "unit"),
        (lambda: MA.fermi_mechanism(lam=-1.0), "lam"),
        (lambda: MA.coinpress_mechanism(rhos=(0.1, -0.1)), "rhos"),
        (lambda: MA.exponential_sampling_mechanism(epsilon=0.0), "epsilon"),
        (lambda: MA.budget_tailoring_mechanism(rho=-1.0), "rho"),
        (lambda: MA.budget_tailoring_mechanism(se_smallest=1.0), "se_smallest"),
        (lambda: MA.budget_tailoring_mechanism(bug="clipping"), "bug"),
        (lambda: MA.budget_tailoring_stage1_mechanism(rho=0.0), "rho"),
        (lambda: MA.budget_tailoring_stage1_mechanism(tau_fraction=1.0), "tau_fraction"),
        (lambda: MA.budget_tailoring_stage1_mechanism(bug="clipping"), "bug"),
        (lambda: MA.output_perturbation_mechanism(reg=0.0), "reg"),
        (lambda: MA.output_perturbation_mechanism(bug="sensitivity"), "bug"),
    ],
)
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
