"""Jagielski et al.'s (2019) DP-oracle-learner (algorithms.jagielski_in, privacy.oracle_learner).

Independent references: the fair optimum over mixtures of the class by ``scipy.optimize.linprog``
and Agarwal et al.'s (2018) saddle-point guarantee (Theorem 1) recomputed in NumPy; the
sensitivities by brute force over every neighbour of a small data set; the noise scales by their
closed forms and a Kolmogorov-Smirnov test of the count noise; the composition against closed
forms and dp-accounting's own accountants; an audit game with a canary whose ``s`` flips.
"""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

from dpfair_jax.algorithms import jagielski_in as J
from dpfair_jax.privacy import oracle_learner as O

DELTA = 1e-5
INF = math.inf


def _problem(K: int = 2, n: int = 600, M: int = 15, seed: int = 0):
    """Threshold classifiers of a score that reads ``s`` only through the data (public class) plus
    the two constant classifiers (so the fair LP is feasible)."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, K, n)
    y = (rng.uniform(size=n) < 0.3 + 0.4 * s / (K - 1)).astype(int)
    score = 1.2 * y + 0.9 * s + rng.normal(size=n)
    preds = np.stack([(score > t).astype(int) for t in np.linspace(-2, 3.5, M)] + [np.zeros(n, int), np.ones(n, int)])
    return preds, y, s


def _tables(preds, y, s, K, denom=None):
    """NumPy reference: error [M] and rate differences D [2(K-1), M] (rows (a, y) for a >= 1)."""
    cnt = np.array([[np.sum((s == a) & (y == v)) for v in (0, 1)] for a in range(K)], float)
    m = np.maximum(cnt, 1.0) if denom is None else np.asarray(denom, float)
    rates = np.array([[preds[:, (s == a) & (y == v)].sum(1) / m[a, v] for v in (0, 1)] for a in range(K)])
    return (preds != y[None]).mean(1), (rates[1:] - rates[:1]).reshape(-1, preds.shape[0])


def _noiseless(**kw):
    return J.JagielskiInHparams(count_epsilon=INF, oracle_epsilon=INF, auditor_epsilon=INF, **kw)


# ------------------------------------------------------------------------ the reduction at eps = inf
@pytest.mark.parametrize("K", [2, 3])
def test_noiseless_reduction_reaches_the_fair_lp_optimum(K):
    """At eps = inf (exact best responses, true counts) the mixture is a nu-approximate saddle
    point with nu at most Agarwal et al.'s bound ``B log(m+1)/(eta T) + eta rho^2 B``; then
    ``err(Q) <= OPT + 2 nu`` and ``max r(Q) <= (OPT - err(Q) + 2 nu)/B`` (their Theorem 1), OPT the
    LP over mixture weights on the same class."""
    preds, y, s = _problem(K)
    err, D = _tables(preds, y, s, K)
    gamma, B, eta, T = 0.02, 5.0, 1.0, 2000
    M = preds.shape[0]
    lp = optimize.linprog(err, A_ub=np.vstack([D, -D]), b_ub=np.full(2 * D.shape[0], gamma),
                          A_eq=np.ones((1, M)), b_eq=[1.0], bounds=[(0, 1)] * M, method="highs")
    assert lp.status == 0
    opt = lp.fun
    res = J.fit(jax.random.key(0), J.OracleData(preds, y, s), _noiseless(B=B, eta=eta, gamma=gamma),
                J.JagielskiInConfig(num_groups=K, steps=T))
    q = np.asarray(res.params["mixture"], float)
    assert np.isclose(q.sum(), 1.0, atol=1e-5)
    lam = np.asarray(res.diagnostics["lambdas"], float).mean(0)
    R = np.vstack([D - gamma, -D - gamma])  # [4(K-1), M]
    L_h = err + lam @ R
    nu = max(q @ L_h - L_h.min(), q @ err + B * max(0.0, (R @ q).max()) - q @ L_h)
    rho = np.abs(R).max()
    assert nu <= B * math.log(R.shape[0] + 1) / (eta * T) + eta * rho ** 2 * B
    assert nu < 0.01  # converged: the guarantee below is not vacuous
    assert np.isclose(nu, float(res.diagnostics["gap"]), atol=1e-4)
    assert q @ err <= opt + 2 * nu + 1e-6
    assert (R @ q).max() <= (opt - q @ err + 2 * nu) / B + 1e-6
    assert abs(q @ err - opt) <= 2 * nu + 0.01 and np.abs(D @ q).max() <= gamma + (1 + 2 * nu) / B
    assert np.isclose(float(res.diagnostics["error"]), q @ err, atol=1e-5)
    assert np.isclose(float(res.diagnostics["violation"]), np.abs(D @ q).max(), atol=1e-5)


# ------------------------------------------------------------------------ sensitivities, brute force
def _small(K=3, n=10, M=5, seed=1):
    rng = np.random.default_rng(seed)
    preds = rng.integers(0, 2, (M, n))
    preds[0] = 1  # the all-ones classifier attains the bounds
    y = rng.integers(0, 2, n)
    s = np.arange(n) % K
    denom = rng.uniform(2.0, 6.0, (K, 2))  # public (released) denominators, fixed across neighbours
    return preds, y, s, denom


def _neighbours(preds, y, s, K, unit):
    """Every neighbour: ``s_i`` to each other group (attribute); record ``i`` replaced by every
    ``(y', s')`` with every prediction pattern of the class on the new ``x`` (example: 2^M)."""
    M, n = preds.shape
    for i in range(n):
        if unit == "sensitive_attribute":
            for g in range(K):
                if g != s[i]:
                    s2 = s.copy(); s2[i] = g
                    yield preds, y, s2
        else:
            for g in range(K):
                for v in (0, 1):
                    for bits in range(2 ** M):
                        p2, y2, s2 = preds.copy(), y.copy(), s.copy()
                        p2[:, i] = [(bits >> j) & 1 for j in range(M)]
                        y2[i], s2[i] = v, g
                        yield p2, y2, s2


@pytest.mark.parametrize("unit", ["sensitive_attribute", "example"])
def test_sensitivities_bound_every_neighbour_and_are_attained(unit):
    K = 3
    preds, y, s, denom = _small(K)
    n = preds.shape[1]
    B = 2.5
    err, D = _tables(preds, y, s, K, denom)
    l1 = float(O.rate_difference_sensitivity(jnp.asarray(denom, jnp.float32), unit))
    linf = float(O.rate_difference_linf_sensitivity(jnp.asarray(denom, jnp.float32)))
    score = float(O.score_sensitivity(jnp.asarray(denom, jnp.float32), B, n, unit))
    # closed forms (module docstring)
    c = np.concatenate([(K - 1) / denom[:1], 1.0 / denom[1:]])
    want_l1 = max(np.sort(c[:, v])[-2:].sum() for v in (0, 1)) if unit == "sensitive_attribute" \
        else np.sort(c.ravel())[-2:].sum()
    assert np.isclose(l1, want_l1, rtol=1e-6)
    assert np.isclose(linf, max(1 / denom[0, v] + 1 / denom[1:, v].min() for v in (0, 1)), rtol=1e-6)
    assert np.isclose(score, B * linf + (1.0 / n if unit == "example" else 0.0), rtol=1e-6)
    # multipliers with ||lam||_1 <= B: random ones, and B on each single coordinate
    rng = np.random.default_rng(2)
    lams = [B * rng.dirichlet(np.ones(4 * (K - 1) + 1))[:-1] for _ in range(5)]
    lams += [B * np.eye(4 * (K - 1))[j] for j in range(4 * (K - 1))]
    W = np.stack([lam[:2 * (K - 1)] - lam[2 * (K - 1):] for lam in lams])  # [L, 2(K-1)]
    max_l1 = max_linf = max_score = 0.0
    for p2, y2, s2 in _neighbours(preds, y, s, K, unit):
        e2, D2 = _tables(p2, y2, s2, K, denom)
        dD = D2 - D
        max_l1 = max(max_l1, np.abs(dD).sum(0).max())
        max_linf = max(max_linf, np.abs(dD).max())
        max_score = max(max_score, np.abs((e2 - err)[None] + W @ dD).max())
    tol = 1e-5
    assert max_l1 <= l1 * (1 + tol) and max_linf <= linf * (1 + tol) and max_score <= score * (1 + tol)
    assert np.isclose(max_l1, l1, rtol=tol) and np.isclose(max_linf, linf, rtol=tol)
    if unit == "sensitive_attribute":
        assert np.isclose(max_score, score, rtol=tol)
    else:  # the error's 1/n and the largest rate move cannot coincide (they need different labels)
        assert max_score >= score - 1.0 / n - tol


def _add_remove_neighbours(preds, y, s, K):
    """Every add/remove neighbour: record ``i`` removed, and a record with every ``(y', s')`` and
    every prediction pattern of the class (2^M) added."""
    M, n = preds.shape
    for i in range(n):
        keep = np.arange(n) != i
        yield preds[:, keep], y[keep], s[keep]
    for g in range(K):
        for v in (0, 1):
            for bits in range(2 ** M):
                col = np.array([[(bits >> j) & 1] for j in range(M)])
                yield np.concatenate([preds, col], 1), np.append(y, v), np.append(s, g)


def test_add_remove_sensitivities_bound_every_neighbour_and_are_attained():
    """The example unit under add/remove: the counts' L1 (1), ``d``'s L1 and L-inf (the largest cell
    weight / inverse denominator, attained) and the score's (``B`` L-inf plus ``1/N~``, the error
    being the error count over the released total ``N~``, public) over every neighbour."""
    K = 3
    preds, y, s, denom = _small(K)
    B, total = 2.5, 9.3  # the released total N~ (public, fixed across neighbours)
    dm = jnp.asarray(denom, jnp.float32)
    l1 = float(O.rate_difference_sensitivity(dm, "example", "add_remove"))
    linf = float(O.rate_difference_linf_sensitivity(dm, "add_remove"))
    score = float(O.score_sensitivity(dm, B, total, "example", "add_remove"))
    c = np.concatenate([(K - 1) / denom[:1], 1.0 / denom[1:]])
    assert np.isclose(l1, c.max(), rtol=1e-6) and np.isclose(linf, (1.0 / denom).max(), rtol=1e-6)
    assert np.isclose(score, B * linf + 1.0 / total, rtol=1e-6)
    # the error term is the count over N~ (here a public constant)
    noisy = jnp.full((K, 2), total / (2 * K), jnp.float32)
    assert np.isclose(float(O.error_denominator(noisy, preds.shape[1], "add_remove")), total, rtol=1e-6)
    got = O.learner_error(None, jnp.asarray(preds, jnp.float32), jnp.asarray(y), noisy, "add_remove")
    assert np.allclose(np.asarray(got), (preds != y[None]).sum(1) / total, rtol=1e-6)

    def tables(p2, y2, s2):
        _, D2 = _tables(p2, y2, s2, K, denom)
        return (p2 != y2[None]).sum(1) / total, D2

    cnt = lambda y2, s2: np.array([[np.sum((s2 == a) & (y2 == v)) for v in (0, 1)] for a in range(K)])  # noqa: E731
    err, D = tables(preds, y, s)
    rng = np.random.default_rng(2)
    lams = [B * rng.dirichlet(np.ones(4 * (K - 1) + 1))[:-1] for _ in range(5)]
    lams += [B * np.eye(4 * (K - 1))[j] for j in range(4 * (K - 1))]
    W = np.stack([lam[:2 * (K - 1)] - lam[2 * (K - 1):] for lam in lams])
    max_l1 = max_linf = max_score = max_count = 0.0
    for p2, y2, s2 in _add_remove_neighbours(preds, y, s, K):
        e2, D2 = tables(p2, y2, s2)
        dD = D2 - D
        max_count = max(max_count, np.abs(cnt(y2, s2) - cnt(y, s)).sum())
        max_l1 = max(max_l1, np.abs(dD).sum(0).max())
        max_linf = max(max_linf, np.abs(dD).max())
        max_score = max(max_score, np.abs((e2 - err)[None] + W @ dD).max())
    tol = 1e-5
    assert max_count == 1.0
    assert max_l1 <= l1 * (1 + tol) and max_linf <= linf * (1 + tol) and max_score <= score * (1 + tol)
    assert np.isclose(max_l1, l1, rtol=tol) and np.isclose(max_linf, linf, rtol=tol)
    assert max_score >= score - 1.0 / total - tol


def test_add_remove_run_draws_at_its_scales_and_records_its_relation():
    """``relation="add_remove"``: the count noise at L1 sensitivity 1 (KS against Laplace(1/eps)),
    the Auditor's and the Learner's scales from the add/remove closed forms of the released counts,
    the spend under add/remove; the relation is refused under the attribute unit."""
    K, eps = 2, 0.7
    y = np.array([0, 1, 1, 0, 1, 0, 0, 1])
    s = np.array([0, 0, 1, 1, 1, 0, 1, 1])
    noisy = jax.vmap(lambda k: O.noisy_group_label_counts(k, jnp.asarray(y), jnp.asarray(s), K, eps, "add_remove"))(
        jax.random.split(jax.random.key(4), 4000))
    true = np.array([[np.sum((s == a) & (y == v)) for v in (0, 1)] for a in range(K)])
    z = (np.asarray(noisy, float) - true).ravel()
    assert stats.kstest(z, stats.laplace(scale=1.0 / eps).cdf).pvalue > 1e-3
    K = 3
    preds, y, s = _problem(K, n=300, M=6)
    hp = J.JagielskiInHparams(B=3.0, eta=0.5, gamma=0.0, count_epsilon=0.5, oracle_epsilon=0.3, auditor_epsilon=0.4)
    cfg = J.JagielskiInConfig(num_groups=K, steps=5, privacy_unit="example", relation="add_remove")
    res = J.fit(jax.random.key(3), J.OracleData(preds, y, s), hp, cfg)
    counts = np.asarray(res.diagnostics["noisy_counts"], float)
    m = np.maximum(counts, 1.0)
    c = np.concatenate([(K - 1) / m[:1], 1.0 / m[1:]])
    assert np.isclose(float(res.diagnostics["auditor_scale"]), c.max() / 0.4, rtol=1e-5)
    want = 3.0 * (1.0 / m).max() + 1.0 / max(counts.sum(), 1.0)
    assert np.isclose(float(res.diagnostics["oracle_sensitivity"]), want, rtol=1e-5)
    assert res.spend.relation == "add_remove" and res.spend.unit == "example"
    same = J.spend(dataclasses.replace(cfg, relation="replace_one"), 300, hp)
    assert res.spend.epsilon == same.epsilon  # the same pure-DP steps, each at its relation's sensitivity
    with pytest.raises(ValueError, match="add_remove"):
        J.JagielskiInConfig(privacy_unit="sensitive_attribute", relation="add_remove").validate()
    with pytest.raises(ValueError, match="relation"):
        J.JagielskiInConfig(privacy_unit="example", relation="substitute").validate()


# ------------------------------------------------------------------------ noise scales
def test_noise_scales_follow_the_released_counts():
    K = 3
    preds, y, s = _problem(K, n=300, M=6)
    hp = J.JagielskiInHparams(B=3.0, eta=0.5, gamma=0.0, count_epsilon=0.5, oracle_epsilon=0.3, auditor_epsilon=0.4)
    cfg = J.JagielskiInConfig(num_groups=K, steps=5)
    res = J.fit(jax.random.key(3), J.OracleData(preds, y, s), hp, cfg)
    m = np.maximum(np.asarray(res.diagnostics["noisy_counts"], float), 1.0)
    c = np.concatenate([(K - 1) / m[:1], 1.0 / m[1:]])
    l1 = max(np.sort(c[:, v])[-2:].sum() for v in (0, 1))
    assert np.isclose(float(res.diagnostics["auditor_scale"]), l1 / 0.4, rtol=1e-5)
    linf = max(1 / m[0, v] + 1 / m[1:, v].min() for v in (0, 1))
    assert np.isclose(float(res.diagnostics["oracle_sensitivity"]), 3.0 * linf, rtol=1e-5)
    assert res.diagnostics["released"].shape == (5, 2 * (K - 1))
    assert np.all(np.asarray(res.params["indices"]) < preds.shape[0])


def test_count_noise_is_laplace_at_its_scale():
    """The released counts minus the true ones over many keys: Laplace(2/eps) (KS test)."""
    K, eps = 2, 0.7
    y = np.array([0, 1, 1, 0, 1, 0, 0, 1])
    s = np.array([0, 0, 1, 1, 1, 0, 1, 1])
    noisy = jax.vmap(lambda k: O.noisy_group_label_counts(k, jnp.asarray(y), jnp.asarray(s), K, eps))(
        jax.random.split(jax.random.key(4), 4000))
    true = np.array([[np.sum((s == a) & (y == v)) for v in (0, 1)] for a in range(K)])
    z = (np.asarray(noisy, float) - true).ravel()
    assert stats.kstest(z, stats.laplace(scale=2.0 / eps).cdf).pvalue > 1e-3
    noiseless = O.noisy_group_label_counts(jax.random.key(0), jnp.asarray(y), jnp.asarray(s), K, jnp.inf)
    assert np.array_equal(np.asarray(noiseless), true)


def test_auditor_noise_is_laplace_at_its_scale():
    """The released rate differences minus the true ones over many keys: Laplace(l1 / eps) (KS test
    on the pooled coordinates), the scale written out from the closed form, not read back."""
    d = jnp.asarray([[0.1, -0.2], [0.3, 0.05]], jnp.float32)
    l1, eps = 0.04, 0.5
    rel = jax.vmap(lambda k: O.noisy_rate_differences(k, d, l1, eps)[0])(jax.random.split(jax.random.key(6), 3000))
    z = (np.asarray(rel, float) - np.asarray(d, float)[None]).ravel()
    assert stats.kstest(z, stats.laplace(scale=l1 / eps).cdf).pvalue > 1e-3
    noiseless = O.noisy_rate_differences(jax.random.key(0), d, l1, jnp.inf)[0]
    assert np.array_equal(np.asarray(noiseless), np.asarray(d))


def test_oracle_draw_frequencies_are_the_exponential_mechanism():
    """Draw frequencies over many keys against ``p_j ∝ exp(-eps score_j / (2 sens))`` written out in
    NumPy (chi-square test); ``eps = inf``: the argmin."""
    scores = np.array([0.30, 0.32, 0.35, 0.40, 0.50])
    eps, sens, n = 0.8, 0.02, 20000
    draws = jax.vmap(lambda k: O.oracle_draw(k, jnp.asarray(scores, jnp.float32), eps, sens))(
        jax.random.split(jax.random.key(7), n))
    logits = -eps * scores / (2.0 * sens)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    obs = np.bincount(np.asarray(draws), minlength=len(scores))
    assert stats.chisquare(obs, n * p).pvalue > 1e-3
    assert int(O.oracle_draw(jax.random.key(0), jnp.asarray(scores, jnp.float32), jnp.inf, sens)) == 0


# ------------------------------------------------------------------------ accounting
def test_bounds_against_independent_composition():
    ec, eo, ea, T = 0.2, 0.05, 0.07, 50
    b = O.oracle_learner_bounds(ec, eo, ea, T, DELTA)
    r = eo + ea
    assert math.isclose(b["basic"], ec + T * r, rel_tol=1e-12)
    adv = r * math.sqrt(2 * T * math.log(1 / DELTA)) + T * r * math.expm1(r)
    assert math.isclose(b["advanced"], ec + adv, rel_tol=1e-12)
    rho = ec ** 2 / 2 + T * (eo ** 2 / 8 + ea ** 2 / 2)
    classic = rho + 2 * math.sqrt(rho * math.log(1 / DELTA))  # Bun & Steinke's conversion (looser)
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.ZCDpEvent(rho))  # the RDP accountant's conversion of the same rho
    assert rdp.get_epsilon(DELTA) * (1 - 1e-3) <= b["zcdp"] <= classic
    # the PLD bound without the exponential mechanism equals dp-accounting's PLD accountant on
    # the composed Laplace events
    pld = dp_accounting.pld.PLDAccountant()
    laplace = dp_accounting.LaplaceDpEvent
    pld.compose(dp_accounting.ComposedDpEvent([laplace(1 / ec), dp_accounting.SelfComposedDpEvent(laplace(1 / ea), T)]))
    assert math.isclose(O.oracle_learner_bounds(ec, 0.0, ea, T, DELTA)["pld"], pld.get_epsilon(DELTA), rel_tol=1e-3)
    eps, how = O.oracle_learner_epsilon(ec, eo, ea, T, DELTA)
    assert eps == min(b.values()) and b[how] == eps
    assert all(math.isinf(v) for v in O.oracle_learner_bounds(INF, eo, ea, T, DELTA).values())


def test_spend_calibrate_and_the_papers_round_budget():
    cfg = J.JagielskiInConfig(num_groups=2, steps=20, privacy_unit="example")
    hp = J.calibrate(cfg, 100, (1.5, DELTA))
    sp = J.spend(cfg, 100, hp)
    assert sp.epsilon <= 1.5 and sp.epsilon >= 1.5 * 0.999
    assert sp.delta == DELTA and sp.relation == "replace_one" and sp.unit == "example"
    assert math.isclose(hp.count_epsilon, 0.15, rel_tol=1e-6) and math.isclose(hp.oracle_epsilon, hp.auditor_epsilon)
    assert sp.epsilon == O.oracle_learner_epsilon(hp.count_epsilon, hp.oracle_epsilon, hp.auditor_epsilon, 20, DELTA)[0]
    paper = 1.5 / (4 * math.sqrt(20 * math.log(1 / DELTA)))
    assert math.isclose(O.paper_round_epsilon(1.5, DELTA, 20), paper)
    assert f"{O.paper_round_epsilon(sp.epsilon, DELTA, 20):.4g}" in sp.notes
    assert math.isinf(J.spend(cfg, 100, _noiseless()).epsilon)
    with pytest.raises(ValueError, match="config.delta"):
        J.calibrate(cfg, 100, (1.5, 1e-6))


# ------------------------------------------------------------------------ jit / vmap
def test_jit_vmap_over_keys_and_a_traced_hyperparameter():
    preds, y, s = _problem(2, n=120, M=6)
    data = J.OracleData(preds, y, s)
    cfg = J.JagielskiInConfig(num_groups=2, steps=8)

    def one(key, B):
        hp = J.JagielskiInHparams(B=B, eta=0.5, count_epsilon=1.0, oracle_epsilon=1.0, auditor_epsilon=1.0)
        res = J.fit(key, data, hp, cfg)
        assert res.spend is None  # traced hparams: spend() with the grid's values
        return res.params["mixture"], res.diagnostics["oracle_sensitivity"], res.diagnostics["noisy_counts"]

    keys = jax.random.split(jax.random.key(5), 3)
    Bs = jnp.array([1.0, 2.0, 4.0])
    q, sens, counts = jax.jit(jax.vmap(one))(keys, Bs)
    assert q.shape == (3, preds.shape[0]) and np.allclose(np.asarray(q).sum(1), 1.0, atol=1e-5)
    m = np.maximum(np.asarray(counts, float), 1.0)  # [3, K, 2]: each key its own released counts
    linf = np.max(1 / m[:, 0, :] + 1 / m[:, 1, :], axis=-1)
    assert np.allclose(np.asarray(sens), np.asarray(Bs) * linf, rtol=1e-5)
    single = J.fit(keys[1], data, J.JagielskiInHparams(B=2.0, eta=0.5, count_epsilon=1.0, oracle_epsilon=1.0,
                                                       auditor_epsilon=1.0), cfg)
    assert np.allclose(np.asarray(single.params["mixture"]), np.asarray(q[1]), atol=1e-6)
    assert single.spend is not None


# ------------------------------------------------------------------------ input errors
def test_bad_input_is_refused_before_compute():
    preds, y, s = _problem(2, n=40, M=4)
    cfg, hp, key = J.JagielskiInConfig(), J.JagielskiInHparams(), jax.random.key(0)
    cases = [
        ((preds, y, s), cfg, hp, "OracleData"),
        (J.OracleData(preds * 2, y, s), cfg, hp, "preds must be binary"),
        (J.OracleData(preds, y + 1, s), cfg, hp, "y must be binary"),
        (J.OracleData(preds, y, s + 2), cfg, hp, r"group ids in \[0, 2\)"),
        (J.OracleData(preds, y[:-1], s), cfg, hp, "length n"),
        (J.OracleData(preds[0], y, s), cfg, hp, r"\[M, n\]"),
        (J.OracleData(preds, y, s), dataclasses.replace(cfg, steps=0), hp, "steps"),
        (J.OracleData(preds, y, s), dataclasses.replace(cfg, privacy_unit="user"), hp, "privacy_unit"),
        (J.OracleData(preds, y, s), dataclasses.replace(cfg, count_share=1.0), hp, "count_share"),
        (J.OracleData(preds, y, s), cfg, dataclasses.replace(hp, B=0.0), "B"),
        (J.OracleData(preds, y, s), cfg, dataclasses.replace(hp, oracle_epsilon=-1.0), "oracle_epsilon"),
        (J.OracleData(preds, y, s), cfg, dataclasses.replace(hp, gamma=-0.1), "gamma"),
    ]
    for data, c, h, msg in cases:
        with pytest.raises(ValueError, match=msg):
            J.fit(key, data, h, c)
    with pytest.raises(ValueError, match="config"):
        J.fit(key, J.OracleData(preds, y, s), hp, object())


# ------------------------------------------------------------------------ empirical privacy
def test_audit_canary_attribute_flip_stays_below_the_recorded_epsilon():
    """A canary (label 1) in group 0 or group 1; the class is the one classifier that predicts 1 on
    the canary alone, so round 1's released FPR/TPR gap moves by exactly the L1 sensitivity.
    The threshold test's Clopper-Pearson lower bound on epsilon (95%) is below the recorded spend
    and above 1 (the audit has power: the Laplace step alone is 2-DP)."""
    K, n, trials = 2, 200, 20000
    s = np.repeat([0, 1], n // 2)
    y = np.tile([0, 1], n // 2)
    canary = 1  # label 1, group 0 in world 0
    preds = np.zeros((1, n), int)
    preds[0, canary] = 1
    cfg = J.JagielskiInConfig(num_groups=K, steps=1)
    hp = J.JagielskiInHparams(B=1.0, eta=0.5, count_epsilon=2.0, oracle_epsilon=0.5, auditor_epsilon=2.0)
    recorded = J.spend(cfg, n, hp).epsilon
    keys = jax.random.split(jax.random.key(6), trials)

    def released(s_world):
        data = J.OracleData(preds, y, s_world)
        f = jax.jit(jax.vmap(lambda k: J.fit(k, data, hp, cfg).diagnostics["released"][0, 1]))
        return np.asarray(f(keys))

    s1 = s.copy(); s1[canary] = 1
    r0, r1 = released(s), released(s1)
    t = 1.0 / 50  # world 1's mean: 1/m_{1,1} with m ~ 50
    k0, k1 = int(np.sum(r0 > t)), int(np.sum(r1 > t))
    p1_lo = stats.beta.ppf(0.025, k1, trials - k1 + 1)
    p0_hi = stats.beta.ppf(0.975, k0 + 1, trials - k0)
    lower = math.log(p1_lo / p0_hi)
    print(f"audit: lower bound {lower:.3f}, recorded {recorded:.3f}")
    assert 1.0 < lower <= recorded, (lower, recorded)
