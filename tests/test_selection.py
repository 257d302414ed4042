"""Accounted private hyperparameter selection (dpfair_jax.privacy.selection), against independent
references: the laws' closed-form means, a chi-square test of the sampler, Theorem 2 of Papernot and
Steinke (2022) re-derived here on the RDP curve of the Gaussian mechanism, and dp-accounting."""

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_mod
from scipy import stats

from dpfair_jax.privacy import selection as S

LAWS = [S.RandomStopping(5.0, 0.0), S.RandomStopping(10.0, 0.5), S.RandomStopping(4.0, 1.0),
        S.RandomStopping(6.0, 2.0), S.RandomStopping(3.0, float("inf"))]


@pytest.mark.parametrize("law", LAWS, ids=lambda l: f"mean{l.mean}-shape{l.shape}")
def test_pmf_sums_to_one_with_the_requested_mean(law):
    k = np.arange(0, 20000)
    p = S.num_runs_pmf(law, k)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    # the solved gamma is conservative: the mean is never below the requested one
    assert law.mean <= (k * p).sum() <= law.mean * (1 + 1e-6)


def test_gamma_matches_dp_accounting():
    for shape, mean in [(0.0, 5.0), (0.5, 10.0), (2.0, 6.0), (1.0, 4.0)]:
        ours = S.RandomStopping(mean, shape).gamma
        ref = rdp_mod._gamma_truncated_negative_binomial(shape, mean)
        assert ours == pytest.approx(ref, rel=1e-8)


@pytest.mark.parametrize("law", [LAWS[0], LAWS[2], LAWS[4]], ids=["log", "geometric", "poisson"])
def test_draws_follow_the_law(law):
    """Chi-square goodness of fit of 600 draws (fixed keys); the p-value of a correct sampler is
    uniform, so the test fails a correct sampler with probability 1e-3 for a random key and never for
    these fixed keys."""
    keys = jax.random.split(jax.random.key(7), 600)
    draws = np.array([S.draw_num_runs(k, law) for k in keys])
    edges = [0, 1, 2, 3, 4, 6, 9, 14, 10**9]
    counts = np.array([((draws >= a) & (draws < b)).sum() for a, b in zip(edges[:-1], edges[1:])])
    probs = np.array([S.num_runs_pmf(law, np.arange(a, min(b, 20000))).sum()
                      for a, b in zip(edges[:-1], edges[1:])])
    keep = probs > 0
    expected = probs[keep] / probs[keep].sum() * len(draws)
    assert stats.chisquare(counts[keep], expected).pvalue > 1e-3


def _theorem2_epsilon(sigma: float, law: S.RandomStopping, delta: float) -> float:
    """Papernot-Steinke Thm 2 applied to the Gaussian mechanism's RDP ``a / (2 sigma^2)``, then the
    monotonicity of RDP in the order and dp-accounting's RDP -> (eps, delta) conversion."""
    orders = np.asarray(S.ORDERS)
    rdp = orders / (2 * sigma**2)
    g, eta = law.gamma, law.shape
    c = (1 + eta) * np.min((1 - 1 / orders) * rdp + math.log(1 / g) / orders)
    out = rdp + math.log(law.mean) / (orders - 1) + c
    out = np.minimum.accumulate(out[::-1])[::-1]
    return rdp_mod.compute_epsilon(orders, out, delta)[0]


@pytest.mark.parametrize("law", LAWS[:4], ids=lambda l: f"shape{l.shape}")
def test_selection_epsilon_is_theorem_2(law):
    sigma, delta = 3.0, 1e-5
    ours = S.selection_epsilon(dp_accounting.GaussianDpEvent(sigma), law, delta)
    assert ours == pytest.approx(_theorem2_epsilon(sigma, law, delta), rel=1e-6)
    single = S.selection_epsilon(dp_accounting.GaussianDpEvent(sigma), None, delta)
    assert ours > single


def test_selection_epsilon_under_replace_one_is_theorem_2_on_that_relations_curve():
    """Under replace-one, the selection bound is Theorem 2 on the run's RDP curve *under
    replace-one* (dp-accounting's, for a fixed-size sampled run), not the add/remove curve; a run
    dp-accounting cannot account under the relation (Poisson sampling under replace-one) is refused."""
    orders = np.asarray(S.ORDERS)
    law, delta = S.RandomStopping(6.0, 1.0), 1e-5
    run = dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        1000, 50, dp_accounting.GaussianDpEvent(1.5)), 40)
    acc = dp_accounting.rdp.RdpAccountant(list(orders), dp_accounting.NeighboringRelation.REPLACE_ONE)
    rdp = np.asarray(acc.compose(run)._rdp, np.float64)
    g, eta = law.gamma, law.shape
    c = (1 + eta) * np.min((1 - 1 / orders) * rdp + math.log(1 / g) / orders)
    out = np.minimum.accumulate((rdp + math.log(law.mean) / (orders - 1) + c)[::-1])[::-1]
    ref = rdp_mod.compute_epsilon(orders, out, delta)[0]
    assert S.selection_epsilon(run, law, delta, relation="replace_one") == pytest.approx(ref, rel=1e-6)
    poisson = dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(1.5))
    with pytest.raises(ValueError, match="RDP"):
        S.selection_epsilon(poisson, law, delta, relation="replace_one")


def test_calibration_is_tight():
    law = S.RandomStopping(10.0, 0.0)
    make = lambda z: dp_accounting.SelfComposedDpEvent(  # noqa: E731
        dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(z)), 200)
    z = S.calibrate_for_selection(make, law, 2.0, 1e-5, rtol=1e-2)
    assert S.selection_epsilon(make(z), law, 1e-5) <= 2.0
    assert S.selection_epsilon(make(z / 1.02), law, 1e-5) > 2.0
    assert S.selection_epsilon(make(z), None, 1e-5) < 2.0  # selection costs something


def test_search_picks_the_best_tried_candidate_and_records_the_spend():
    grid = jnp.linspace(-2.0, 2.0, 9)

    def run_fn(keys, idx):
        noise = jax.vmap(lambda k: 0.01 * jax.random.normal(k))(keys)
        return -jnp.abs(grid[idx] - 0.5) + noise, {"value": grid[idx]}

    event = dp_accounting.GaussianDpEvent(4.0)
    law = S.RandomStopping(8.0, 1.0)
    res = S.random_stopping_search(jax.random.key(3), run_fn, grid.size, law, event=event, delta=1e-5)
    assert res.num_runs == len(res.runs) == len(res.scores) >= 1
    assert res.index == res.runs[int(np.argmax(res.scores))]
    assert float(res.output["value"]) == pytest.approx(float(grid[res.index]))
    assert res.accounted and res.epsilon == pytest.approx(S.selection_epsilon(event, law, 1e-5))
    # same key, same search
    again = S.random_stopping_search(jax.random.key(3), run_fn, grid.size, law, event=event, delta=1e-5)
    assert again.index == res.index and again.num_runs == res.num_runs


def test_nonprivate_selection_is_labelled_unaccounted():
    res = S.select_nonprivate([0.1, 0.7, 0.3], outputs=np.array([10, 20, 30]))
    assert res.index == 1 and res.output == 20
    assert not res.accounted and math.isinf(res.epsilon)


@pytest.mark.parametrize("kw", [dict(mean=0.5), dict(mean=float("nan")), dict(shape=-1.0)])
def test_bad_laws_are_refused(kw):
    with pytest.raises(ValueError, match="RandomStopping"):
        S.RandomStopping(**kw)


def test_unaccountable_event_is_refused():
    with pytest.raises(ValueError, match="RDP"):
        S.selection_epsilon(dp_accounting.UnsupportedDpEvent(), S.RandomStopping(), 1e-5)
