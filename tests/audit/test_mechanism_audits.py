"""Empirical privacy audits of the training mechanisms (dpfair_jax.audit.mechanism_audits: the
registry over the per-family game modules) and the DP-FERMI games.

Each audit runs the public entry point on its default configuration in a distinguishing game and
checks: the bug-free mechanism's lower bound (95%) does not exceed the epsilon the kit's accountant
claims, and each planted bug's bound is above its claim (power). Keys are fixed, so the outcomes are
deterministic; the per-family modules' own test files (audit/test_default_path_audits.py,
algorithms/test_budget_tailoring_privacy.py, algorithms/test_mean_estimation_privacy.py, algorithms/test_reductions_privacy.py) test
their games in detail.
"""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

from dpfair_jax import audit
from dpfair_jax.audit import fermi_games as FG
from dpfair_jax.audit import mechanism_audits as MA
from dpfair_jax.audit import parametric as P
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


def test_registry_covers_every_family_with_builders_bugs_and_sizes():
    expected = {"dpsgd", "dpsgd_replace", "dpsgd_mlp", "group_weighted", "output_perturbation", "mitigation",
                "fermi", "fermi_sensitive", "budget_tailoring", "budget_tailoring_stage1", "budget_tailoring_fit",
                "stratified_coinpress", "mean_add_remove", "exponential_sampling", "private_cgoo",
                "pfld", "pfld_epoch", "sgda", "synthesis"}
    assert expected <= set(MA.FAMILIES)  # the game modules may add families
    modules = set(MA.FAMILY_MODULES.values())
    assert sum(len(m.FAMILY_BUGS) for m in modules) == len(MA.FAMILIES)  # no family name in two modules
    for fam in MA.FAMILIES:
        mod = MA.FAMILY_MODULES[fam]
        assert callable(mod.BUILDERS[fam]) and MA.FAMILY_BUGS[fam]
        assert MA.SUITE_TRIALS["quick"][fam] <= MA.SUITE_TRIALS["full"][fam]
    # the planted bugs: each corrected default's former behaviour is a named variant
    for fam, bug in [("fermi_sensitive", "subsampled_accounting"), ("budget_tailoring", "private_denominator"),
                     ("budget_tailoring_stage1", "stage1_paper_clip"), ("mean_add_remove", "exact_counts"),
                     ("exponential_sampling", "private_thresholds"), ("private_cgoo", "private_thresholds"),
                     ("group_weighted", "realized_denominator"), ("output_perturbation", "data_radius")]:
        assert bug in MA.FAMILY_BUGS[fam]


def test_every_algorithm_has_a_game_or_a_reason():
    """The registry is keyed by dpfair_jax.algorithms.ALGORITHMS: each algorithm has at least one
    family (a FitSpendGame on its fit/spend) or a one-line reason in NO_GAME, never both; every
    family audits an algorithm or is a listed privacy primitive."""
    from dpfair_jax import algorithms

    assert set(MA.ALGORITHM_GAMES) | set(MA.NO_GAME) == set(algorithms.ALGORITHMS)
    assert not set(MA.ALGORITHM_GAMES) & set(MA.NO_GAME)
    for alg, fams in MA.ALGORITHM_GAMES.items():
        assert fams, alg
        assert all(MA.FAMILY_MODULES[f].ALGORITHMS[f] == alg for f in fams)
    for alg, reason in MA.NO_GAME.items():
        assert isinstance(reason, str) and reason and "\n" not in reason
    games = [f for fams in MA.ALGORITHM_GAMES.values() for f in fams]
    assert sorted(games + list(MA.PRIMITIVE_FAMILIES)) == sorted(MA.FAMILIES)
    assert MA.PRIMITIVE_FAMILIES == ("group_weighted",)


@pytest.mark.slow
def test_game_claims_are_the_algorithms_spend():
    """A family's claim is its game's spend (the algorithm's spend of the nominal hparams), for the
    bug-free variant and for every planted bug that changes only the run."""
    for fam in ("dpsgd", "fermi", "mitigation"):
        mod = MA.FAMILY_MODULES[fam]
        game = mod.dpsgd_game(fam) if fam == "dpsgd" else (
            mod.fermi_default_game() if fam == "fermi" else mod.mitigation_game())
        sp = game.spend()
        alg = getattr(__import__("dpfair_jax.algorithms", fromlist=[fam]), MA.FAMILY_MODULES[fam].ALGORITHMS[fam])
        ref = max(alg.spend(game.config, m, game.hparams).epsilon for m in game.world_sizes())
        assert sp.epsilon == ref
        for bug in (None,) + MA.FAMILY_BUGS[fam]:
            assert MA.build(fam, bug)[1]["claimed_epsilon"] == ref


@pytest.mark.slow
def test_fermi_default_configuration_audit():
    """DP-FERMI as a user runs it (all features, Poisson q = 1/2, noisy frequencies, ghost path,
    C != 1): the claim holds and every planted bug, noise x 1/2 included, is caught."""
    rows = MA.audit_family_variants(jax.random.key(13), "fermi", num_trials=MA.SUITE_TRIALS["quick"]["fermi"])
    _check_rows(rows, "fermi", (None,) + MA.FAMILY_BUGS["fermi"])
    assert rows[0]["relation"] == "add_remove" and rows[0]["selection"] == "parametric_subsampled_gaussian"


@pytest.mark.slow
def test_fermi_sensitive_attribute_audit_catches_the_subsampled_accounting():
    """The sensitive-attribute unit: the public task gradient reveals batch membership, so the
    earlier Poisson-subsampled record (planted bug) is below what the run demonstrably spends, and
    the membership-visible record holds."""
    rows = MA.audit_family_variants(jax.random.key(14), "fermi_sensitive",
                                    num_trials=MA.SUITE_TRIALS["quick"]["fermi_sensitive"])
    _check_rows(rows, "fermi_sensitive", (None,) + MA.FAMILY_BUGS["fermi_sensitive"])
    none, sub = rows[0], rows[-1]
    assert none["relation"] == "replace_one"
    assert sub["claimed_epsilon"] < sub["epsilon_lower_bound"] <= none["claimed_epsilon"]


@pytest.mark.slow
def test_fermi_games_statistics_have_the_designed_law():
    """The parametric bounds rest on the statistic's law: N(0, z^2) without the canary and a
    q-mixture with shift 1 with it (fermi); a visible indicator at rate q (fermi_sensitive)."""
    fn, info = FG.fermi_default_mechanism()
    keys = jax.random.split(jax.random.key(3), 3000)
    w0 = np.asarray(jax.jit(jax.vmap(lambda k: fn(k, jax.numpy.int32(0))))(keys))
    w1 = np.asarray(jax.jit(jax.vmap(lambda k: fn(k, jax.numpy.int32(1))))(keys))
    z, q = 2.0, 0.5
    assert abs(w0.mean()) < 4 * z / math.sqrt(w0.size)
    assert abs(w0.std() - z) < 4 * z / math.sqrt(2 * w0.size)
    sd1 = math.sqrt(z**2 + q * (1 - q))
    assert abs(w1.mean() - q) < 4 * sd1 / math.sqrt(w1.size)
    fn, info = FG.fermi_sensitive_mechanism()
    s = np.asarray(jax.jit(jax.vmap(lambda k: fn(k, jax.numpy.int32(0))))(keys))
    vis = s > -1e8
    assert abs(vis.mean() - 0.05) < 4 * math.sqrt(0.05 * 0.95 / vis.size)


def test_parametric_bounds_recover_known_gaussians():
    rng = np.random.default_rng(0)
    n, q, mu = 20000, 0.3, 1.5
    x0 = rng.normal(size=n)
    x1 = rng.normal(size=n) + mu * (rng.random(n) < q)
    b = P.subsampled_gaussian_bound(x1, x0, q, 1e-5)
    assert b.mu_low < mu and abs(b.mu_hat - mu) < 0.1
    assert 0 < b.epsilon_lower_bound
    from dpfair_jax.privacy import accounting as A

    exact = A.epsilon_of_event(A.dpsgd_event(1.0 / mu, q, 1), 1e-5, accountant="pld")
    assert b.epsilon_lower_bound <= exact
    vis1, vis0 = rng.random(n) < q, rng.random(n) < q
    y1, y0 = rng.normal(size=n) + mu, rng.normal(size=n)
    vb = P.visible_membership_bound(y1, y0, vis1, vis0, 1e-5)
    part = A.participation_distribution(1, "poisson", sample_rate=q)
    assert vb.mu_low < mu and vb.epsilon_lower_bound <= A.membership_visible_epsilon(mu, 1e-5, part)
    assert vb.epsilon_lower_bound > 0.8 * A.membership_visible_epsilon(mu, 1e-5, part)


@pytest.mark.slow
def test_run_audit_with_mechanisms(tmp_path):
    df = audit.run_audit(quick=True, out=tmp_path, mechanisms=True)
    assert len(df) == 6 + sum(1 + len(b) for b in MA.FAMILY_BUGS.values())
    assert df.passed.all(), df[~df.passed]
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
        (lambda: MA.build("fermi", "subsampled_accounting"), "bug"),
        (lambda: MA.mechanism_audit_suite(jax.random.key(0), families=("nope",)), "family"),
        (lambda: FG.fermi_default_mechanism(n=2), "n"),
        (lambda: P.subsampled_gaussian_bound(np.zeros(3), np.zeros(3), 0.5, 1e-5), "with_canary"),
    ],
)
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
