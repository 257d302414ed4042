"""Audit games of PF-LD (stochastic and per-epoch), DP-SGDA and the marginal synthesizer.

Each family at a cheap size: the bug-free default passes (bound at most the claim), the planted
``"noise"`` bug is caught (bound above the claim), the statistic's shift/scale ratio matches the law
the game's construction gives (within 4 standard errors), and the claim is the module's own
``spend``. The binomial-mixture curve of ``pfld_games`` is checked against dp-accounting's PLD
(one step) and against the Gaussian curve it reduces to at ``q = 1``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy import stats

from dpfair_jax import montecarlo
from dpfair_jax.algorithms import pfld, pfld_epoch, sgda, synthesis
from dpfair_jax.audit import fit_spend, pfld_games, sgda_games, synthesis_games
from dpfair_jax.audit import parametric as P


def _variants(module, family: str, bugs: tuple, trials: int, seed: int) -> list[tuple]:
    """``(bug, info, ParametricBound)`` per variant, all variants in one compiled program."""
    built = [module.BUILDERS[family](bug=b) for b in bugs]
    fns = tuple(fn for fn, _ in built)

    def trial(k):
        flags = jnp.array([0, 1], jnp.int32)
        keys = jax.random.split(k, len(fns))
        return jnp.stack([jnp.reshape(jax.vmap(fn)(jax.random.split(kk, 2), flags), (2,))
                          for fn, kk in zip(fns, keys)])

    out = np.asarray(montecarlo.run_trials(trial, jax.random.key(seed), trials, chunk_size=trials), np.float64)
    return [(b, info, module.parametric_bound(info, out[:, j, 1], out[:, j, 0], 0.95))
            for j, (b, (_, info)) in enumerate(zip(bugs, built))]


def _check(rows, mu_nominal: float, mu_tol: float) -> None:
    (_, info0, clean), (_, info1, noisy) = rows
    assert clean.epsilon_lower_bound <= info0["claimed_epsilon"], (clean, info0)
    assert noisy.epsilon_lower_bound > info1["claimed_epsilon"], (noisy, info1)
    assert info0["claimed_epsilon"] == info1["claimed_epsilon"]  # the claim is the nominal spend
    assert abs(clean.mu_hat - mu_nominal) < mu_tol, (clean.mu_hat, mu_nominal)
    assert abs(noisy.mu_hat - 10.0 * mu_nominal) < 10.0 * mu_tol, (noisy.mu_hat, mu_nominal)


def _mu_tol(trials: int, q: float, mu: float, steps: int = 1) -> float:
    """4 standard errors of ``mu_hat = (mean_1 - mean_0) / (S q s)`` in units where ``s = 1``:
    world 1's variance is ``1 + S q (1 - q) mu^2`` (the sampled count's), world 0's 1."""
    var = (2.0 + steps * q * (1 - q) * mu**2) / trials
    return 4.0 * math.sqrt(var) / (steps * q)


@pytest.mark.slow
def test_pfld_game_passes_bug_free_and_catches_noise():
    rows = _variants(pfld_games, "pfld", (None, "noise"), 1000, 1)
    _check(rows, mu_nominal=0.5, mu_tol=_mu_tol(1000, 0.5, 0.5))


@pytest.mark.slow
def test_pfld_epoch_game_passes_bug_free_and_catches_noise():
    rows = _variants(pfld_games, "pfld_epoch", (None, "noise"), 1000, 2)
    mu = 1.0 / math.sqrt(2.0)  # two steps at z = 1: the sum's std is sqrt(2)
    _check(rows, mu_nominal=mu, mu_tol=_mu_tol(1000, 0.5, mu, steps=2))


@pytest.mark.slow
def test_sgda_game_passes_bug_free_and_catches_noise():
    rows = _variants(sgda_games, "sgda", (None, "noise"), 1000, 3)
    mu = math.sqrt(2.0) / 1.5  # effective multiplier (1.5^-2 + 1.5^-2)^-1/2
    _check(rows, mu_nominal=mu, mu_tol=_mu_tol(1000, 0.5, mu))


@pytest.mark.slow
@pytest.mark.slow
def test_sgda_shuffle_game_passes_bug_free_and_catches_noise():
    rows = _variants(sgda_games, "sgda_shuffle", (None, "noise"), 1000, 5)
    # replace-one: the canary moves the sum by 2 in units of C; two steps' noise: std sqrt(2) z
    mu = 2.0 / (math.sqrt(2.0) * 3.0 / math.sqrt(2.0))
    _check(rows, mu_nominal=mu, mu_tol=_mu_tol(1000, 1.0, mu))


@pytest.mark.slow
def test_synthesis_game_passes_bug_free_and_catches_noise():
    rows = _variants(synthesis_games, "synthesis", (None, "noise"), 200, 4)
    _check(rows, mu_nominal=1.0, mu_tol=_mu_tol(200, 1.0, 1.0))  # mu = sqrt(2 rho), rho = 0.5


def test_claims_are_the_modules_spend():
    """Each game's claim is its module's ``spend`` of the nominal hparams (larger over the worlds'
    sizes), with the relation the pair encodes; a planted bug leaves the claim as it is."""
    cases = (
        (pfld_games.pfld_game, pfld, "pfld", (31, 32)),
        (pfld_games.pfld_epoch_game, pfld_epoch, "pfld_epoch", (31, 32)),
        (sgda_games.sgda_game, sgda, "sgda", (31, 32)),
        (sgda_games.sgda_shuffle_game, sgda, "sgda_shuffle", (32, 32)),
        (synthesis_games.synthesis_game, synthesis, "synthesis", (240, 241)),
    )
    for make, algorithm, family, sizes in cases:
        game = make()
        want = max(algorithm.spend(game.config, n, game.hparams).epsilon for n in sizes)
        module = {"pfld": pfld_games, "pfld_epoch": pfld_games, "sgda": sgda_games,
                  "sgda_shuffle": sgda_games, "synthesis": synthesis_games}[family]
        for bug in (None, "noise"):
            _, info = module.BUILDERS[family](bug=bug)
            assert info["claimed_epsilon"] == want, (family, bug)
            assert info["relation"] == ("replace_one" if family == "sgda_shuffle" else "add_remove")
            assert math.isfinite(want) and want > 0
        assert game.world_sizes() == sizes
    _, info = pfld_games.BUILDERS["pfld_epoch"]()
    assert info["steps"] == 2 and info["bound"] == "binomial_gaussian" and info["sample_rate"] == 0.5


@pytest.mark.slow
def test_binomial_gaussian_curve_matches_references():
    # one step: the Poisson-subsampled Gaussian's PLD (dp-accounting)
    for mu, q in ((1.0, 0.5), (2.0, 0.2)):
        ours = pfld_games.binomial_gaussian_epsilon(mu, q, 1, 1e-5)
        want = pld.from_gaussian_mechanism(1.0 / mu, sampling_prob=q, pessimistic_estimate=False,
                                           value_discretization_interval=1e-4).get_epsilon_for_delta(1e-5)
        assert ours == pytest.approx(want, abs=2e-3)
    # q = 1: every step samples the canary, so the sum of S steps is N(S mu, 1) against N(0, 1)
    def gauss_delta(m: float, eps: float) -> float:
        return stats.norm.cdf(-eps / m + m / 2) - math.exp(eps) * stats.norm.cdf(-eps / m - m / 2)

    eps = pfld_games.binomial_gaussian_epsilon(0.6, 1.0, 3, 1e-5)
    assert gauss_delta(1.8, eps) == pytest.approx(1e-5, rel=1e-3)
    # more steps at the same rate and ratio: a larger epsilon (monotone in S)
    assert pfld_games.binomial_gaussian_epsilon(0.7, 0.5, 3, 1e-5) > pfld_games.binomial_gaussian_epsilon(
        0.7, 0.5, 2, 1e-5)


def test_one_step_bound_matches_the_subsampled_gaussian_bound():
    """With one step the binomial-mixture bound is parametric's subsampled-Gaussian bound (same
    estimates, curve on a grid against dp-accounting's PLD)."""
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=3000)
    x1 = rng.normal(size=3000) + (rng.random(3000) < 0.5) * 1.0
    ours = pfld_games.binomial_gaussian_bound(x1, x0, 0.5, 1, 1e-5)
    ref = P.subsampled_gaussian_bound(x1, x0, 0.5, 1e-5)
    assert ours.mu_low == pytest.approx(ref.mu_low, rel=1e-12)
    assert ours.epsilon_lower_bound == pytest.approx(ref.epsilon_lower_bound, abs=2e-3)
    assert 0.5 < ours.epsilon_lower_bound < 3.6  # mu = 1: the exact curve gives 3.53


def test_binomial_gaussian_bound_refuses_bad_input():
    x = np.zeros(10)
    with pytest.raises(ValueError, match="steps"):
        pfld_games.binomial_gaussian_bound(x + 1, x, 0.5, 0, 1e-5)
    with pytest.raises(ValueError, match="sample_rate"):
        pfld_games.binomial_gaussian_bound(x + 1, x, 1.5, 1, 1e-5)
    with pytest.raises(ValueError, match="at least 4 finite"):
        pfld_games.binomial_gaussian_bound(x[:2], x, 0.5, 1, 1e-5)


def test_builders_refuse_unknown_bugs_and_name_their_algorithms():
    for module in (pfld_games, sgda_games, synthesis_games):
        for fam, bugs in module.FAMILY_BUGS.items():
            assert set(module.SUITE_TRIALS["quick"]) == set(module.FAMILY_BUGS)
            assert module.ALGORITHMS[fam] in ("pfld", "pfld_epoch", "sgda", "synthesis")
            assert "noise" in bugs
            with pytest.raises(ValueError, match="bug"):
                module.BUILDERS[fam](bug="no_such_bug")
    with pytest.raises(ValueError, match="canary"):
        synthesis_games.synthesis_game(canary=(1, 3, 1))
    assert set(fit_spend.GENERIC_BUGS) >= set(pfld_games.FAMILY_BUGS["pfld"])
