"""The audit games of Jagielski et al.'s DP post-processing (dpfair_jax.audit.jagielski_games).

The game drives ``jagielski.fit`` on its default configuration (the sensitive-attribute unit,
``JagielskiHparams()``) and is judged against ``jagielski.spend``; the bug-free lower bound (95%,
Clopper-Pearson) must stay at or below the claim and a halved Laplace scale must be caught. Keys
are fixed, so the outcomes are deterministic.
"""

from __future__ import annotations

import jax
import pytest

from dpfair_jax.algorithms import jagielski as J
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


@pytest.mark.parametrize("call, field", [
    (lambda: JG.jagielski_game(bug="clipping"), "bug"),
    (lambda: JG.jagielski_example_mechanism(bug="example_sensitivity"), "bug"),
    (lambda: JG.jagielski_game(privacy_unit="group"), "privacy_unit"),
    (lambda: JG.jagielski_game(n=2), "n"),
])
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
