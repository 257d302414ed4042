"""The audit games of Jagielski et al.'s DP post-processing and DP-oracle-learner
(dpfair_jax.audit.jagielski_games).

The post-processing game drives ``jagielski.fit`` on its default configuration (the
sensitive-attribute unit, ``JagielskiHparams()``) and is judged against ``jagielski.spend``; the
bug-free lower bound (95%, Clopper-Pearson) must stay at or below the claim and a halved Laplace
scale must be caught. The oracle-learner games drive ``jagielski_in.fit`` on the default
``JagielskiInConfig()`` and ``JagielskiInHparams()`` (100 rounds) against ``jagielski_in.spend``.
Keys are fixed, so the outcomes are deterministic.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dpfair_jax.algorithms import jagielski as J
from dpfair_jax.algorithms import jagielski_in as JI
from dpfair_jax.audit import jagielski_games as JG
from dpfair_jax.audit import mechanism_audits as MA


def _check(rows, bugs):
    assert [r["planted_bug"] for r in rows] == [b or "none" for b in bugs]
    for r in rows:
        if r["planted_bug"] == "none":
            assert 0.0 <= r["epsilon_lower_bound"] <= r["claimed_epsilon"], r
        else:
            assert r["epsilon_lower_bound"] > r["claimed_epsilon"], r
        assert r["passed"], r


def test_jagielski_is_registered_with_a_game():
    assert "jagielski" not in MA.NO_GAME
    assert set(MA.ALGORITHM_GAMES["jagielski"]) == {"jagielski", "jagielski_example"}


def test_game_is_the_default_configuration_and_its_claim_the_spend():
    g = JG.jagielski_game()
    assert g.config == J.JagielskiConfig() and g.hparams == J.JagielskiHparams()
    sp = J.spend(J.JagielskiConfig(), 40, J.JagielskiHparams())
    assert g.spend().epsilon == sp.epsilon == 1.0 and sp.relation == "replace_one"
    info = JG.jagielski_mechanism()[1]
    assert info["claimed_epsilon"] == 1.0 and info["relation"] == "replace_one"
    assert info["unit"] == "sensitive_attribute"
    ex = JG.jagielski_example_mechanism()[1]
    assert ex["relation"] == "add_remove" and ex["unit"] == "example" and ex["claimed_epsilon"] == 1.0
    d0, d1 = g.neighbours  # only s of the last record differs
    for a, b in zip(d0[:2], d1[:2]):
        assert (a == b).all()
    assert int((d0[2] != d1[2]).sum()) == 1


def test_sensitive_attribute_audit_holds_and_catches_a_halved_scale():
    """Default config: the claim (epsilon = 1, replace-one of one s_i) holds; the Laplace scale
    halved (noise_multiplier / 2, true epsilon 2) is caught."""
    bugs = (None, "noise_half")
    rows = MA.audit_family_variants(jax.random.key(27), "jagielski", bugs,
                                    num_trials=MA.SUITE_TRIALS["quick"]["jagielski"])
    _check(rows, bugs)
    assert rows[0]["relation"] == "replace_one"
    assert rows[0]["epsilon_lower_bound"] > 0.6  # the game is tight enough to mean something


@pytest.mark.slow
def test_every_planted_bug_is_caught():
    """Noise / 10 and the run noised for the example unit's sensitivity (1 instead of 2) on the
    sensitive-attribute unit; the example unit's add/remove game with noise / 10 and / 2."""
    for fam in ("jagielski", "jagielski_example"):
        bugs = (None,) + MA.FAMILY_BUGS[fam]
        rows = MA.audit_family_variants(jax.random.key(28), fam, num_trials=MA.SUITE_TRIALS["quick"][fam])
        _check(rows, bugs)
        assert rows[0]["relation"] == ("replace_one" if fam == "jagielski" else "add_remove")


def test_jagielski_in_is_registered_with_a_game():
    assert "jagielski_in" not in MA.NO_GAME and not MA.NO_GAME
    assert set(MA.ALGORITHM_GAMES["jagielski_in"]) == {"jagielski_in", "jagielski_in_example", "jagielski_in_oracle"}


def test_jagielski_in_games_are_the_default_configuration_and_their_claim_the_spend():
    """Default config and hparams for the attribute unit (only privacy_unit changes for the
    example family); the claim is ``jagielski_in.spend`` at n = 200 for every variant; the pair
    differs in the canary's s (attribute) or its s and y (example) and nothing else."""
    sp = JI.spend(JI.JagielskiInConfig(), 200, JI.JagielskiInHparams())
    assert 5.3 < sp.epsilon < 5.5 and sp.delta == 1e-5 and sp.relation == "replace_one"
    for fam, unit, changed in (("jagielski_in", "sensitive_attribute", (2,)), ("jagielski_in_example", "example", (1, 2)),
                               ("jagielski_in_oracle", "sensitive_attribute", (2,))):
        learner = fam == "jagielski_in_oracle"
        g = JG.jagielski_in_game(privacy_unit=unit, learner=learner)
        assert g.config == JI.JagielskiInConfig(privacy_unit=unit) and g.hparams == JI.JagielskiInHparams()
        for bug in (None,) + MA.FAMILY_BUGS[fam]:
            info = MA.build(fam, bug)[1]
            assert info["claimed_epsilon"] == sp.epsilon and info["relation"] == "replace_one"
            assert info["unit"] == unit
        d0, d1 = g.neighbours
        for j, (a, b) in enumerate(zip(d0, d1)):
            assert int((a != b).sum()) == (1 if j in changed else 0), (fam, j)
        assert d0.preds.shape[0] == (2 if learner else 1) and int(d0.preds.sum()) == 1


def _in_statistics(bug, trials, key=3):
    from dpfair_jax.audit.games import run_game

    r = run_game(MA.game("jagielski_in", bug).mechanism_fn, jax.random.key(key), trials)
    return np.asarray(r.without), np.asarray(r.with_canary)


def test_jagielski_in_statistic_is_the_auditor_likelihood_ratio():
    """Bug-free, 400 runs per world: each world's statistic has the mean and spread of the summed
    clipped Laplace log-likelihood ratio of 100 releases whose shift is the L1 sensitivity at
    auditor epsilon 0.1 (per round, in units of the shift: mean +-0.0484 and sd 0.983 by
    quadrature of the Laplace density; 100 rounds: +-4.84, sd 9.83). Measured at 8,000 runs:
    -5.07 and +4.73, sd 9.77 (se 0.11)."""
    for w, sign in zip(_in_statistics(None, 400), (-1, 1)):
        se = 9.83 / np.sqrt(w.size)
        assert abs(w.mean() - sign * 4.84) < 4 * se, (w.mean(), se)
        assert 9.0 < w.std() < 10.7, w.std()


def test_jagielski_in_audit_holds_and_catches_the_auditor_noise_off():
    """Default config (claim 5.40 at delta 1e-5): the bug-free bound stays below the claim and
    the Auditor's noise removed is caught, at 4,000 trials (half the quick size: the bug separates
    the worlds completely, its bound is the threshold bound's ceiling 6.30 at 2,000 measuring trials)."""
    bugs = (None, "auditor_off")
    rows = MA.audit_family_variants(jax.random.key(29), "jagielski_in", bugs, num_trials=4000)
    _check(rows, bugs)
    assert rows[0]["epsilon_lower_bound"] > 0.0  # the canary moves the statistic


@pytest.mark.slow
def test_every_jagielski_in_planted_bug_is_caught():
    """Both units, every planted bug (Auditor scale / 10, Auditor noise off, count noise off), and
    the Learner's game (exponential mechanism's temperature / 100, exact argmin), at the quick
    suite size."""
    for fam in ("jagielski_in", "jagielski_in_example", "jagielski_in_oracle"):
        bugs = (None,) + MA.FAMILY_BUGS[fam]
        rows = MA.audit_family_variants(jax.random.key(30), fam, num_trials=MA.SUITE_TRIALS["quick"][fam])
        _check(rows, bugs)
        assert all(r["relation"] == "replace_one" for r in rows)
    # the Auditor's noise off puts every run at +-100 (the per-round maximum); the count noise off
    # adds +-400 (the released counts are a world's exact counts)
    off0, off1 = _in_statistics("auditor_off", 200)
    assert np.allclose(off0, -100, atol=1e-3) and np.allclose(off1, 100, atol=1e-3)
    c0, c1 = _in_statistics("count_off", 200)
    assert (c0 < -290).all() and (c1 > 290).all()


@pytest.mark.parametrize("call, field", [
    (lambda: JG.jagielski_game(bug="clipping"), "bug"),
    (lambda: JG.jagielski_example_mechanism(bug="example_sensitivity"), "bug"),
    (lambda: JG.jagielski_game(privacy_unit="group"), "privacy_unit"),
    (lambda: JG.jagielski_game(n=2), "n"),
    (lambda: JG.jagielski_in_game(bug="noise"), "bug"),
    (lambda: JG.jagielski_in_game(privacy_unit="group"), "privacy_unit"),
    (lambda: JG.jagielski_in_game(positives=60), "positives"),
    (lambda: JG.jagielski_in_game(bug="auditor_off", learner=True), "bug"),
    (lambda: JG.jagielski_in_game(privacy_unit="example", learner=True), "privacy_unit"),
])
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
