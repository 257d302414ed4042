"""Accounted private hyperparameter selection (dpfair_jax.privacy.selection), against independent
references: the laws' closed-form means, a chi-square test of the sampler, Theorem 2 of Papernot and
Steinke (2022) re-derived here on the RDP curve of the Gaussian mechanism, and dp-accounting."""

import dataclasses
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_mod
from scipy import special, stats

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
    seen = {}

    def run_fn(keys, idx):
        noise = jax.vmap(lambda k: 0.01 * jax.random.normal(k))(keys)
        scores = -jnp.abs(grid[idx] - 0.5) + noise
        seen.update(idx=np.asarray(idx), scores=np.asarray(scores))
        return scores, {"value": grid[idx]}

    event = dp_accounting.GaussianDpEvent(4.0)
    law = S.RandomStopping(8.0, 1.0)
    key = jax.random.key(3)
    res = S.random_stopping_search(key, run_fn, grid.size, law, event=event, delta=1e-5)
    k = S.draw_num_runs(jax.random.split(key, 3)[0], law)  # the search's own K, re-drawn here
    assert 1 <= k <= len(seen["idx"])
    assert res.index == seen["idx"][int(np.argmax(seen["scores"][:k]))]
    assert res.score == pytest.approx(float(np.max(seen["scores"][:k])))
    assert float(res.output["value"]) == pytest.approx(float(grid[res.index]))
    assert res.accounted and res.epsilon == pytest.approx(S.selection_epsilon(event, law, 1e-5))
    # same key, same search
    again = S.random_stopping_search(key, run_fn, grid.size, law, event=event, delta=1e-5)
    assert again.index == res.index and again.score == res.score


def test_public_result_holds_only_the_winner():
    """The Papernot-Steinke bound covers the best run only: the result must not hold K, the
    candidates tried or the losing scores (not as fields, not inside any field)."""
    grid = jnp.linspace(-2.0, 2.0, 9)

    def run_fn(keys, idx):
        return -jnp.abs(grid[idx] - 0.5), {"value": grid[idx]}

    law = S.RandomStopping(8.0, 1.0)
    event = dp_accounting.GaussianDpEvent(4.0)
    released = {"index", "score", "output", "epsilon", "delta", "accounted", "method"}
    assert {f.name for f in dataclasses.fields(S.SelectionResult)} == released
    res = S.random_stopping_search(jax.random.key(0), run_fn, grid.size, law, event=event, delta=1e-5)  # K = 14
    assert not hasattr(res, "num_runs") and not hasattr(res, "runs") and not hasattr(res, "scores")
    assert np.shape(res.output["value"]) == () and res.method == "random_stopping(mean=8.0, shape=1.0)"
    assert all(np.ndim(v) == 0 for f, v in vars(res).items() if f != "output")
    res = S.select_nonprivate([0.1, 0.7, 0.3], outputs=np.array([10, 20, 30]))
    assert {f.name for f in dataclasses.fields(res)} == released


def _max_of_k_densities(z: float, law, x: np.ndarray):
    """Densities [k, x] of the best of k Gaussian scores N(f, z^2) (every candidate the same,
    sensitivity 1) on the grid ``x``, for f = 1 (P) and f = 0 (Q), k = 1..256."""
    ks = np.arange(1, 257)
    assert S.num_runs_pmf(law, ks).sum() > 1.0 - 1e-12

    def dens(shift):
        a = (x - shift) / z
        return np.exp(stats.norm.logpdf(a)[None] - math.log(z) + np.log(ks)[:, None]
                      + (ks[:, None] - 1) * special.log_ndtr(a)[None])

    return S.num_runs_pmf(law, ks), dens(1.0), dens(0.0)


@pytest.mark.parametrize("recorded, lo, hi", [(1.0, 1.95, 2.1), (3.0, 6.9, 7.3)])
def test_releasing_k_breaks_the_recorded_bound(recorded, lo, hi):
    """docs/trust.md's numbers, by numerical integration: runs whose Gaussian score (sensitivity 1)
    is calibrated so that the best of K ~ geometric(mean 8) costs ``recorded`` at delta = 1.16e-9
    (Adult's 1 / n_train^2). Released alone, the best score is within the record; released with K
    (the output is (K, best of K), a mixture over K of best-of-k) it costs about 2.0 (1) and 7.1
    (3)."""
    law, delta = S.RandomStopping(8.0, 1.0), 1.16e-9
    z = S.calibrate_for_selection(lambda s: dp_accounting.GaussianDpEvent(s), law, recorded, delta, rtol=1e-3)
    x = np.linspace(-12.0 * z - 6.0, 12.0 * z + 6.0, 8001)
    dx = x[1] - x[0]
    p, P, Q = _max_of_k_densities(z, law, x)

    def known(eps):  # hockey-stick divergence of (K, best of K), both directions
        return max((np.maximum(a - math.exp(eps) * b, 0.0).sum(1) * dx) @ p for a, b in ((P, Q), (Q, P)))

    def hidden(eps):  # the best of K alone: the mixture's densities
        mp, mq = p @ P, p @ Q
        return max(np.maximum(a - math.exp(eps) * b, 0.0).sum() * dx for a, b in ((mp, mq), (mq, mp)))

    assert hidden(recorded) <= delta  # the Papernot-Steinke record holds while K stays hidden
    assert known(lo) > delta > known(hi)  # with K released it does not: epsilon in (lo, hi)


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
