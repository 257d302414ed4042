"""Tests for dpfair_jax.audit: Clopper-Pearson vs SciPy, lower bounds, one-run audit, games, audits."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpfair_jax import audit
from dpfair_jax.audit import lower_bounds as LB

# ----------------------------------------------------------------------------- Clopper-Pearson


@pytest.mark.parametrize("n", [1, 7, 50, 1000])
@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_clopper_pearson_matches_scipy(n, conf):
    ks = np.unique(np.array([0, 1, n // 3, n // 2, n - 1, n]).clip(0, n))
    low, high = LB.clopper_pearson(ks, np.full(ks.shape, n), conf)
    for k, lo, hi in zip(ks, low, high):
        ci = stats.binomtest(int(k), n).proportion_ci(confidence_level=conf, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-12)
        assert hi == pytest.approx(ci.high, abs=1e-12)
    # one-sided bounds are the one-sided beta quantiles
    lo1, hi1 = LB.clopper_pearson(ks, np.full(ks.shape, n), conf, side="lower")
    assert np.all(hi1 == 1.0)
    for k, lo in zip(ks, lo1):
        want = 0.0 if k == 0 else stats.beta.ppf(1 - conf, k, n - k + 1)
        assert lo == pytest.approx(want, abs=1e-12)
    _, hi2 = LB.clopper_pearson(ks, np.full(ks.shape, n), conf, side="upper")
    for k, hi in zip(ks, hi2):
        want = 1.0 if k == n else stats.beta.ppf(conf, k + 1, n - k)
        assert hi == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("p", [0.01, 0.2, 0.5, 0.93])
def test_clopper_pearson_exact_coverage(p):
    """Coverage computed exactly from the binomial pmf is at least the nominal level."""
    n, conf = 60, 0.9
    k = np.arange(n + 1)
    low, high = LB.clopper_pearson(k, np.full(k.shape, n), conf)
    cover = np.sum(stats.binom.pmf(k, n, p) * ((low <= p) & (p <= high)))
    assert cover >= conf - 1e-12
    lo1, _ = LB.clopper_pearson(k, np.full(k.shape, n), conf, side="lower")
    assert np.sum(stats.binom.pmf(k, n, p) * (lo1 <= p)) >= conf - 1e-12


def test_epsilon_from_counts_hand_computation():
    tp, fn, fp, tn, delta, conf = 900, 100, 50, 950, 1e-5, 0.95
    level = 1 - (1 - conf) / 2
    tpr_low = stats.beta.ppf(1 - level, tp, fn + 1)
    fpr_high = stats.beta.ppf(level, fp + 1, tn)
    want = max(math.log((tpr_low - delta) / fpr_high), math.log((1 - fpr_high - delta) / (1 - tpr_low)))
    assert LB.epsilon_lower_bound_from_counts(tp, fn, fp, tn, delta, conf) == pytest.approx(want, rel=1e-12)
    # swapping the two worlds and the guess gives the same bound; useless tests give 0
    assert LB.epsilon_lower_bound_from_counts(tn, fp, fn, tp, delta, conf) == pytest.approx(want, rel=1e-12)
    # the test is directional: guessing backwards proves nothing
    assert LB.epsilon_lower_bound_from_counts(fn, tp, tn, fp, delta, conf) == 0.0
    assert LB.epsilon_lower_bound_from_counts(500, 500, 500, 500, delta, conf) == 0.0
    vec = LB.epsilon_lower_bound_from_counts([tp, 500], [fn, 500], [fp, 500], [tn, 500], delta, conf)
    np.testing.assert_allclose(vec, [want, 0.0], rtol=1e-12)
    # more trials, same rates: tighter (larger) bound
    assert LB.epsilon_lower_bound_from_counts(9000, 1000, 500, 9500, delta, conf) > want


def test_bound_from_scores_selection_modes():
    rng = np.random.default_rng(0)
    # Laplace mechanism, epsilon = 1, sensitivity 1: the true epsilon is exactly 1
    s_out = rng.laplace(0.0, 1.0, 20000)
    s_in = rng.laplace(1.0, 1.0, 20000)
    split = LB.epsilon_lower_bound_from_scores(s_in, s_out, 0.0, 0.95)
    assert 0.3 < split.epsilon_lower_bound <= 1.0 and split.trials_used == 20000
    bonf = LB.epsilon_lower_bound_from_scores(s_in, s_out, 0.0, 0.95, selection="bonferroni",
                                              thresholds=np.linspace(-1, 3, 9))
    assert 0.3 < bonf.epsilon_lower_bound <= 1.0 and bonf.trials_used == 40000
    with pytest.raises(ValueError, match="thresholds"):
        LB.epsilon_lower_bound_from_scores(s_in, s_out, selection="bonferroni")
    with pytest.raises(ValueError, match="selection"):
        LB.epsilon_lower_bound_from_scores(s_in, s_out, selection="best")


# ----------------------------------------------------------------------------- one-run auditing


def _p_value_reference(m, r, v, eps, delta):
    """Steinke, Nasr, Jagielski (2023) p-value, loop form of their published algorithm."""
    q = 1 / (1 + math.exp(-eps))
    beta = stats.binom.sf(v - 1, r, q)
    alpha, acc = 0.0, 0.0
    for i in range(1, v + 1):
        acc += stats.binom.pmf(v - i, r, q)
        alpha = max(alpha, acc / i)
    return min(beta + alpha * delta * 2 * m, 1.0)


@pytest.mark.parametrize("m,r,v", [(1000, 100, 90), (1000, 100, 60), (50, 50, 50), (200, 20, 10)])
@pytest.mark.parametrize("eps,delta", [(0.0, 0.0), (1.0, 0.0), (1.0, 1e-5), (3.0, 1e-3)])
def test_one_run_p_value_matches_reference(m, r, v, eps, delta):
    assert LB.one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        _p_value_reference(m, r, v, eps, delta), rel=1e-10, abs=1e-300)


def test_one_run_lower_bound():
    lb = LB.one_run_epsilon_lower_bound(1000, 100, 90, 0.0, 0.95)
    assert LB.one_run_p_value(1000, 100, 90, lb, 0.0) == pytest.approx(0.05, rel=1e-6)
    assert LB.one_run_epsilon_lower_bound(1000, 100, 90, 1e-5, 0.95) <= lb  # delta weakens it
    assert LB.one_run_epsilon_lower_bound(1000, 100, 50, 0.0, 0.95) == 0.0  # chance accuracy
    assert LB.one_run_epsilon_lower_bound(1000, 100, 95, 0.0, 0.95) > lb
    # randomized response with epsilon = 1 on 2000 canaries: the bound must stay below 1
    rng = np.random.default_rng(1)
    inc = rng.random(2000) < 0.5
    truthful = rng.random(2000) < 1 / (1 + math.exp(-1.0))
    scores = np.where(truthful, inc, ~inc).astype(float) + 1e-3 * rng.random(2000)
    lb_rr, r, v = LB.one_run_audit_from_scores(scores, inc, k_pos=500, k_neg=500)
    assert (r, v) == (1000, int(np.sum(inc[np.argsort(scores)[-500:]]) + np.sum(~inc[np.argsort(scores)[:500]])))
    assert 0.2 < lb_rr <= 1.0


# ----------------------------------------------------------------------------- games


def test_run_game_statistics_and_determinism():
    fn, info = audit.clipped_sum_mechanism("gaussian", epsilon=1.0, delta=1e-5)
    key = jax.random.key(3)
    g = audit.run_game(fn, key, 3000, chunk_size=1000)
    assert g.without.shape == (3000,) and g.with_canary.shape == (3000,)
    sigma = info["noise_scale"]  # in units of the clip norm (clip_norm = 1)
    se = sigma * math.sqrt(2.0 / 3000)
    assert np.mean(g.with_canary) - np.mean(g.without) == pytest.approx(1.0, abs=5 * se)
    assert np.std(g.without) == pytest.approx(sigma, rel=5 / math.sqrt(2 * 3000))
    assert abs(np.corrcoef(g.without, g.with_canary)[0, 1]) < 5 / math.sqrt(3000)  # independent keys
    g2 = audit.run_game(fn, key, 3000, chunk_size=1000)
    np.testing.assert_array_equal(g.without, g2.without)
    # the flag is traced: the mechanism is one program over both worlds
    stats2 = jax.jit(jax.vmap(fn))(jax.random.split(key, 2), jnp.array([0, 1]))
    assert stats2.shape == (2,)


def test_laplace_game_scale():
    fn, info = audit.clipped_sum_mechanism("laplace", epsilon=2.0)
    g = audit.run_game(fn, jax.random.key(4), 4000)
    b = info["noise_scale"]
    assert b == 0.5
    # Laplace(b) has mean absolute deviation b
    assert np.mean(np.abs(g.without)) == pytest.approx(b, rel=5 / math.sqrt(4000))


def test_audits_pass_and_catch_planted_bugs(tmp_path):
    df = audit.run_audit(quick=True, out=tmp_path)
    assert set(audit.AUDIT_COLUMNS) <= set(df.columns)
    assert len(df) == 6
    real = df[df.planted_bug == "none"]
    bugs = df[df.planted_bug != "none"]
    assert (real.epsilon_lower_bound <= real.claimed_epsilon).all()
    assert (bugs.epsilon_lower_bound > bugs.claimed_epsilon).all()
    assert df.passed.all()
    assert set(bugs.planted_bug) == {"noise", "clipping"}
    rows = json.loads((tmp_path / "audit.json").read_text())
    assert len(rows) == 6 and (tmp_path / "audit.csv").exists()


def test_audit_mechanism_judges_bug_flag():
    # the real Gaussian mechanism claimed as a 'bug' must fail the audit (no power at epsilon 1)
    fn, _ = audit.clipped_sum_mechanism("gaussian", epsilon=1.0, delta=1e-5)
    row = audit.audit_mechanism(fn, jax.random.key(5), mechanism="g", claimed_epsilon=1.0, delta=1e-5,
                                num_trials=500, planted_bug="mislabelled")
    assert row["passed"] is False and row["planted_bug"] == "mislabelled"


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda: LB.clopper_pearson(5, 4), "successes"),
        (lambda: LB.clopper_pearson(1, 4, 1.5), "confidence"),
        (lambda: LB.epsilon_lower_bound_from_counts(1, 1, 1, 1, delta=1.0), "delta"),
        (lambda: LB.one_run_p_value(10, 5, 6, 1.0), "v <= r"),
        (lambda: LB.one_run_audit_from_scores([1.0, 2.0], [1], k_pos=1, k_neg=0), "same length"),
        (lambda: audit.clipped_sum_mechanism("cauchy", epsilon=1.0), "kind"),
        (lambda: audit.clipped_sum_mechanism("gaussian", epsilon=1.0, delta=1e-5, bug="x"), "bug"),
        (lambda: audit.clipped_sum_mechanism("laplace", epsilon=1.0, delta=1e-5), "delta"),
        (lambda: audit.run_game(lambda k, f: 0.0, jax.random.key(0), 0), "num_trials"),
    ],
)
def test_validation_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()


@pytest.mark.parametrize("selection", ["split", "bonferroni"])
def test_bound_is_valid_over_repeated_audits(selection):
    """Laplace mechanism with true epsilon 1: the 95% bound exceeds 1 in at most ~5% of audits."""
    rng = np.random.default_rng(7)
    reps, n = 200, 400
    over = 0
    for _ in range(reps):
        s_out = rng.laplace(0.0, 1.0, n)
        s_in = rng.laplace(1.0, 1.0, n)
        kw = {"thresholds": np.linspace(0.0, 3.0, 7)} if selection == "bonferroni" else {}
        b = LB.epsilon_lower_bound_from_scores(s_in, s_out, 0.0, 0.95, selection=selection,
                                               split_seed=int(rng.integers(1 << 30)), **kw)
        over += b.epsilon_lower_bound > 1.0
    # binomial(200, 0.05): mean 10, sd 3.1
    assert over <= 10 + 3 * math.sqrt(reps * 0.05 * 0.95)
