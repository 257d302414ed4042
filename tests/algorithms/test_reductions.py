"""Paper 002 reductions: Algorithm 1 vs the exponential mechanism, sensitivities by brute force,
oracles vs NumPy, Frank-Wolfe vs a SciPy optimum within Lemma B.2's rate, Algorithm 2's ledger."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

from dpfair_jax.algorithms import reductions as R
from dpfair_jax.algorithms.reductions.oracles import _lopt_scores
from dpfair_jax.privacy.mechanisms import exponential_mechanism_logits
from dpfair_jax.privacy import accounting as acc


def _problem(K=2, eta=(0.3, 0.3)):
    return R.CGOO(R.sum_objective(K), R.bounded_group_loss(list(eta)), K)


def _grid_losses(M=8, K=2, seed=0):
    return np.random.default_rng(seed).uniform(0.0, 0.6, (M, K)).astype(np.float32)


def _np_h(L, eta, G):
    return L.sum(1) + G * np.maximum(0.0, (L - np.asarray(eta)).max(1))


def test_exponential_sampling_matches_em_probabilities_chi_square():
    L, K, n, eps = _grid_losses(), 2, 50, 1.0
    prob = _problem()
    G = 3.0
    # independent reference: exp(-eps h / (2 Delta)), Delta = (L_f + G L_g) sqrt(K) / n
    delta_h = (math.sqrt(K) + G) * math.sqrt(K) / n
    logits = -eps * _np_h(L.astype(np.float64), (0.3, 0.3), G) / (2 * delta_h)
    p_ref = np.exp(logits - logits.max())
    p_ref /= p_ref.sum()
    p = np.asarray(R.exponential_sampling_probs(L, prob, G=G, epsilon=eps, n=n))
    np.testing.assert_allclose(p, p_ref, rtol=2e-5, atol=1e-7)
    draws = 20000
    keys = jax.random.split(jax.random.key(123), draws)
    idx = jax.jit(jax.vmap(lambda k: R.exponential_sampling(k, L, prob, G=G, epsilon=eps, n=n)))(keys)
    counts = np.bincount(np.asarray(idx), minlength=len(L))
    keep = p_ref * draws >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(p_ref[keep], p_ref[~keep].sum()) * draws
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    assert p_ref.max() < 0.9  # the test is informative (not a point mass)


def test_exponential_sampling_paper_sensitivity_and_traced_epsilon_grid():
    L, n, prob = _grid_losses(), 50, _problem()
    pc = R.exponential_sampling_probs(L, prob, G=2.0, epsilon=1.0, n=n)
    pp = R.exponential_sampling_probs(L, prob, G=2.0, epsilon=1.0, n=n, variant="paper")
    # paper's sqrt(K)(1+G)/n < (sqrt(K) + G) sqrt(K)/n for f = sum: the literal one is sharper
    assert float(jnp.max(pp)) > float(jnp.max(pc))
    eps = jnp.array([0.1, 1.0, 10.0])
    keys = jax.random.split(jax.random.key(0), 3)
    f = jax.jit(jax.vmap(lambda k, e: R.exponential_sampling(k, L, prob, G=2.0, epsilon=e, n=n)))
    out = f(keys, eps)
    for i in range(3):
        assert int(out[i]) == int(R.exponential_sampling(keys[i], L, prob, G=2.0, epsilon=float(eps[i]), n=n))


def test_h_sensitivity_bounds_replace_one_by_brute_force():
    rng = np.random.default_rng(1)
    n, K, M = 40, 3, 30
    per = rng.uniform(0, 1, (M, n)).astype(np.float32)
    s = rng.integers(0, K, n)
    prob = R.CGOO(R.sum_objective(K), R.bounded_group_loss([0.1, 0.1, 0.1]), K)
    G = 4.0
    h = lambda P, S: np.asarray(jax.vmap(lambda l: R.penalized(prob, l, G))(R.group_losses(P, S, K)))
    base = h(per, s)
    worst = 0.0
    for _ in range(50):
        i = rng.integers(n)
        per2, s2 = per.copy(), s.copy()
        per2[:, i] = rng.uniform(0, 1, M) > 0.5  # extreme losses
        s2[i] = rng.integers(K)
        worst = max(worst, np.abs(h(per2, s2) - base).max())
    bound = R.h_sensitivity(prob, n, G)
    assert worst <= bound + 1e-6
    assert worst > 0.1 * bound  # the bound is not vacuous here
    l = R.group_losses(per, s, K)
    ref = np.stack([(per[:, s == k]).sum(1) / n for k in range(K)], 1)
    np.testing.assert_allclose(np.asarray(l), ref, rtol=1e-5, atol=1e-7)


def test_penalty_weight_penalized_grad_and_smax_gradient():
    assert R.penalty_weight(0.1, 4) == pytest.approx((0.1 + 2.0) / 0.1)
    prob = _problem()
    l = jnp.array([0.5, 0.2])  # g = 0.2 >= 0: constraint active on group 0
    r = R.penalized_grad(prob, l, 5.0)
    np.testing.assert_allclose(np.asarray(r), [1.0 + 5.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(R.penalized_grad(prob, l, 5.0, variant="paper")), [2.0, 1.0], rtol=1e-6)
    l2 = jnp.array([0.1, 0.2])  # inactive
    np.testing.assert_allclose(np.asarray(R.penalized_grad(prob, l2, 5.0)), [1.0, 1.0], rtol=1e-6)
    y, eta = jnp.array([0.1, 0.7, 0.4]), 3.0
    s = R.smax(y, eta)
    p = np.exp(eta * np.asarray(y)) / np.exp(eta * np.asarray(y)).sum()
    analytic = p * (1 + eta * (np.asarray(y) - float(s)))
    np.testing.assert_allclose(np.asarray(jax.grad(R.smax)(y, eta)), analytic, rtol=1e-5)
    assert float(R.smax(y, 200.0)) == pytest.approx(0.7, abs=1e-3)
    # smoothed penalty: an upper bound of the hinge within G log(2)/t, its gradient is penalized_grad's
    for lv in (jnp.array([0.5, 0.2]), jnp.array([0.29, 0.1])):
        hard, soft = R.penalized(prob, lv, 5.0), R.penalized(prob, lv, 5.0, smoothing=100.0)
        assert float(hard) <= float(soft) <= float(hard) + 5.0 * math.log(2) / 100 + 1e-6
        auto = jax.grad(lambda z: R.penalized(prob, z, 5.0, smoothing=100.0))(lv)
        np.testing.assert_allclose(np.asarray(R.penalized_grad(prob, lv, 5.0, smoothing=100.0)), np.asarray(auto),
                                   rtol=1e-5)


def test_equalized_odds_constraint_and_objective_hand_values():
    # layout (FP_1, FP_2, TP_1, TP_2, FN_1, FN_2)
    l = jnp.array([0.10, 0.05, 0.30, 0.20, 0.02, 0.04])
    g = R.equalized_odds_constraint(2, 0.01, eta=1e4, mu=1e-6)
    assert float(g(l)) == pytest.approx(0.10 - 0.01, abs=1e-4)  # max(|0.05|, |0.10|) - alpha
    q = np.array([[0.4, 0.1], [0.3, 0.2]])  # P(s=a, y=0), P(s=a, y=1)
    gh = R.equalized_odds_constraint(2, 0.01, eta=None, normalizers=q)
    ref = max(abs(0.10 / 0.4 - 0.05 / 0.3), abs(0.30 / 0.1 - 0.20 / 0.2)) - 0.01
    assert float(gh(l)) == pytest.approx(ref, rel=1e-5)
    rng = np.random.default_rng(0)
    for fn in (gh, R.equalized_odds_constraint(3, 0.0, eta=5.0, mu=0.05, normalizers=np.full((3, 2), 0.2))):
        K = 9 if fn is not gh else 6
        a, b = rng.uniform(0, 0.2, (200, K)), rng.uniform(0, 0.2, (200, K))
        ratio = np.abs(np.asarray(jax.vmap(fn)(jnp.asarray(a))) - np.asarray(jax.vmap(fn)(jnp.asarray(b))))
        assert np.all(ratio <= fn.lipschitz * np.linalg.norm(a - b, axis=1) + 1e-5)
    f = R.equalized_odds_objective(2)
    assert float(f(l)) == pytest.approx(0.10 + 0.05 + 0.02 + 0.04)
    assert R.confusion_index(2, 1, 3) == 3
    gi = R.gini_constraint(0.1, 3)
    lv = np.array([0.1, 0.2, 0.4])
    ref = np.abs(lv[:, None] - lv[None]).sum() - 2 * 3 * 0.1 * lv.sum()
    assert float(gi(jnp.asarray(lv))) == pytest.approx(ref, rel=1e-5)


def test_figure2_formulas_as_written():
    # notes B.7: uniform G = H = 1/L; geometric (1/3, row-major): L=2 G=0.433, H=0.18
    for L in (2, 3, 5):
        v = R.figure2_means(L, "uniform")
        assert v["g_mean"] == pytest.approx(1 / L, rel=1e-5) and v["h_mean"] == pytest.approx(1 / L, rel=1e-5)
    v = R.figure2_means(2, "geometric")
    assert v["g_mean"] == pytest.approx(0.4330, abs=1e-3) and v["h_mean"] == pytest.approx(0.18, abs=1e-3)


def test_lopt_oracles_against_numpy():
    L = _grid_losses(M=20, K=3, seed=2)
    w = np.array([0.3, 1.0, 0.5], np.float32)
    assert int(R.lopt_grid(L, w)) == int(np.argmin(L @ w))
    # LOPT_{eps,0}: EM probabilities exp(-eps w.l / (2 ||w|| Delta))
    eps, sens = 2.0, 0.05
    lg = exponential_mechanism_logits(_lopt_scores(L, w), epsilon=eps, sensitivity=sens)
    ref = -eps * (L @ w) / (np.linalg.norm(w) * 2 * sens)
    np.testing.assert_allclose(np.asarray(lg), ref, rtol=1e-5)
    idx = R.lopt_grid_private(jax.random.key(0), L, w, epsilon=1e6, loss_sens=sens)
    assert int(idx) == int(np.argmin(L @ w))
    # weighted least squares vs NumPy lstsq on sqrt-weighted rows
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 3))
    s = rng.integers(0, 2, 200)
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.3 + np.where(s == 1, 1.0, 0.0) + 0.1 * rng.normal(size=200)
    gw = np.array([1.0, 3.0])
    p = R.weighted_least_squares(x, y, s, gw, num_groups=2)
    X = np.hstack([x, np.ones((200, 1))])
    sw = np.sqrt(gw[s])[:, None]
    ref, *_ = np.linalg.lstsq(sw * X, sw[:, 0] * y, rcond=None)
    np.testing.assert_allclose(np.r_[np.asarray(p.w), float(p.b)], ref, rtol=1e-3, atol=1e-3)
    # DP-GD oracle: zero noise, large clip reaches the WLS solution; calibrated std closed form
    q = R.dp_weighted_least_squares(jax.random.key(1), x, y, s, gw, num_groups=2, noise_std=0.0,
                                    steps=400, clip_norm=1e3, learning_rate=0.2, radius=100.0)
    np.testing.assert_allclose(np.r_[np.asarray(q.w), float(q.b)], ref, atol=2e-2)
    rho = acc.dp_to_rho(1.0, 1e-5)
    assert R.dp_gd_noise_std(1.0, 1e-5, 50, 0.5) == pytest.approx(2 * 0.5 / math.sqrt(2 * rho / 50))


def test_lopt_private_draw_frequencies_are_the_exponential_mechanism():
    """``lopt_grid_private``'s draws over many keys against ``p_m ∝ exp(-eps w.l_m / (2 ||w|| Delta))``
    written out in NumPy (chi-square): the sensitivity it is given is the one its draw uses."""
    L = _grid_losses(M=8, K=3, seed=5)
    w = np.array([0.3, 1.0, 0.5], np.float32)
    eps, sens, n = 1.0, 0.05, 20000
    draws = jax.vmap(lambda k: R.lopt_grid_private(k, L, w, epsilon=eps, loss_sens=sens))(
        jax.random.split(jax.random.key(11), n))
    logits = -eps * (np.asarray(L, np.float64) @ w) / (2.0 * np.linalg.norm(w) * sens)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    obs = np.bincount(np.asarray(draws), minlength=len(p))
    keep = n * p >= 5  # chi-square cells with enough expected counts; the rest pooled
    f_obs = np.r_[obs[keep], obs[~keep].sum()] if np.any(~keep) else obs
    f_exp = np.r_[n * p[keep], n * p[~keep].sum()] if np.any(~keep) else n * p
    assert stats.chisquare(f_obs, f_exp).pvalue > 1e-3


def _hull_qp_optimum(L, b):
    """min over the simplex of 0.5 ||lambda^T L - b||^2 (SciPy SLSQP)."""
    M = len(L)
    fun = lambda lam: 0.5 * np.sum((lam @ L - b) ** 2)
    jac = lambda lam: L @ (lam @ L - b)
    res = optimize.minimize(fun, np.full(M, 1 / M), jac=jac, bounds=[(0, 1)] * M,
                            constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1}],
                            method="SLSQP", options={"ftol": 1e-14, "maxiter": 1000})
    return res.fun


def test_frank_wolfe_reaches_convex_optimum_within_lemma_b2_rate():
    L = _grid_losses(M=25, K=2, seed=4).astype(np.float64)
    b = np.array([0.05, 0.45])
    bj = jnp.asarray(b, jnp.float32)
    f = R.GroupFunction(lambda l: 0.5 * jnp.sum((l - bj) ** 2), 2.0, 1.0, "quad")
    g = R.GroupFunction(lambda l: -1.0 + 0.0 * jnp.sum(l), 0.0, 0.0, "inactive")
    prob = R.CGOO(f, g, 2)
    h_star = _hull_qp_optimum(L, b)
    diam2 = max(np.sum((L[i] - L[j]) ** 2) for i in range(len(L)) for j in range(len(L)))
    C_h = diam2 * 1.0  # Lemma B.3
    for T in (8, 60):
        res = R.frank_wolfe(L.astype(np.float32), prob, G=1.0, steps=T)
        gap = float(f(res.loss)) - h_star
        assert -1e-6 <= gap <= 2 * C_h / (T + 2) + 1e-6
        assert float(jnp.sum(res.weights)) == pytest.approx(1.0, abs=1e-5)
        np.testing.assert_allclose(np.asarray(res.loss), np.asarray(R.mixture_loss(L, res.indices, res.weights)),
                                   atol=1e-6)
    assert gap < 0.2 * 2 * C_h / (T + 2) or gap < 1e-4
    # the paper-literal variant returns a uniform mixture of T decisions
    lit = R.frank_wolfe(L.astype(np.float32), prob, G=1.0, steps=10, variant="paper")
    np.testing.assert_allclose(np.asarray(lit.weights), 0.1, rtol=1e-6)


def test_frank_wolfe_constrained_linear_instance_near_lp_optimum():
    L = _grid_losses(M=40, K=2, seed=5).astype(np.float64)
    eta = np.array([0.2, 0.25])
    # the CGOO optimum over mixtures is an LP: min 1.lambda^T L s.t. lambda^T L <= eta, lambda in simplex
    lp = optimize.linprog(L.sum(1), A_ub=L.T, b_ub=eta, A_eq=np.ones((1, 40)), b_eq=[1.0], bounds=(0, 1))
    assert lp.status == 0
    prob = R.CGOO(R.sum_objective(2), R.bounded_group_loss(eta, temperature=400.0), 2)
    alpha = 0.02
    G = R.penalty_weight(alpha, 2, prob.f.lipschitz)
    res = R.frank_wolfe(L.astype(np.float32), prob, G=G, steps=1000, smoothing=5000.0)
    assert float(res.objective) <= lp.fun + alpha / 4
    assert float(jnp.max(res.loss - eta)) <= alpha / 4


def _lemma_a4(eps_round, T, delta_bar):
    """Advanced composition (Lemma A.4, Dwork-Rothblum-Vadhan) written out:
    eps_round sqrt(2 T ln(1/delta_bar)) + T eps_round (e^eps_round - 1)."""
    return eps_round * math.sqrt(2 * T * math.log(1 / delta_bar)) + T * eps_round * (math.exp(eps_round) - 1)


def test_algorithm2_ledger_literal_paper_budget_by_hand():
    """Lines 5 and 7 of Alg. 2 as printed, pure oracle, eps = 1, delta = 1e-6, T = 40:
    eps' = 1 / (2 sqrt(80 ln 1e6)) = 1 / (2 * 33.2452) = 0.0150398, whose first Lemma A.4 term
    is exactly eps / 2 = 0.5 and whose second is 40 * 0.0150398 * (e^0.0150398 - 1)
    = 40 * 0.0150398 * 0.0151535 = 0.0091162: total 0.5091162, delta 0 * 40 + 1e-6."""
    b = R.algorithm2_budget(1.0, 1e-6, 40, n=1000, num_groups=3, oracle="pure", variant="paper")
    assert b.round_epsilon == pytest.approx(0.0150398, abs=1e-7)
    led = R.algorithm2_ledger(b)
    assert led["epsilon"] == pytest.approx(0.5091162, abs=1e-7)
    assert led["delta"] == 1e-6
    assert led["per_round"]["oracle"][0] + led["per_round"]["weights"][0] == pytest.approx(0.0150398, abs=1e-7)
    # approximate oracle, as printed: delta' = delta / (2T) = 1.25e-8 and eps' with ln(2/delta')
    # (delta_bar = delta' / 2 = 6.25e-9); total delta = 40 * 1.25e-8 + 6.25e-9 = 5.0625e-7
    b = R.algorithm2_budget(1.0, 1e-6, 40, n=1000, num_groups=3, oracle="approximate", variant="paper")
    eps_r = 1.0 / (2 * math.sqrt(80 * math.log(2 / 1.25e-8)))
    assert b.round_epsilon == pytest.approx(eps_r, rel=1e-12) and b.oracle_delta == pytest.approx(1.25e-8)
    led = R.algorithm2_ledger(b)
    assert led["delta"] == pytest.approx(5.0625e-7, rel=1e-12)
    assert led["epsilon"] == pytest.approx(_lemma_a4(eps_r, 40, 6.25e-9), rel=1e-12)
    assert led["epsilon"] < 1.0


@pytest.mark.parametrize("oracle", ["pure", "approximate"])
@pytest.mark.parametrize("privatize", [True, False])
def test_algorithm2_ledger_against_lemma_a4_by_hand(oracle, privatize):
    """The default budget: the round's eps' (oracle + Laplace weights) composes by Lemma A.4,
    written out here, to the target: delta_bar = delta (pure) or delta / 2 (approximate,
    delta' = delta / (2T)); eps' is the largest such value (1e-6 more overshoots). Without
    privatized weights line 10 reads the private losses without noise: no finite epsilon."""
    eps, delta, T, n, K = 1.0, 1e-6, 40, 1000, 3
    b = R.algorithm2_budget(eps, delta, T, n=n, num_groups=K, oracle=oracle, privatize_weights=privatize)
    d_step, d_bar = (0.0, delta) if oracle == "pure" else (delta / (2 * T), delta / 2)
    er = b.round_epsilon
    assert b.oracle_delta == pytest.approx(d_step, rel=1e-12) and b.delta_bar == pytest.approx(d_bar, rel=1e-12)
    assert _lemma_a4(er, T, d_bar) == pytest.approx(eps, rel=1e-9)
    assert _lemma_a4(er * (1 + 1e-6), T, d_bar) > eps
    led = R.algorithm2_ledger(b)
    assert led["delta"] == pytest.approx(T * d_step + d_bar, rel=1e-12)
    if privatize:
        assert led["epsilon"] == pytest.approx(_lemma_a4(er, T, d_bar), rel=1e-12)
        assert b.weight_epsilon == pytest.approx(0.25 * er, rel=1e-12)
        assert b.oracle_epsilon == pytest.approx(0.75 * er, rel=1e-12)
        assert b.laplace_scale == pytest.approx((K / n) / (0.25 * er), rel=1e-12)  # l1 sensitivity K/n
    else:  # fails on the old ledger, which charged the oracle calls only
        assert led["epsilon"] == math.inf and "no finite guarantee" in led["notes"]
        assert led["paper_epsilon"] == pytest.approx(_lemma_a4(er, T, d_bar), rel=1e-12)
        assert b.oracle_epsilon == er and b.laplace_scale == 0.0


def test_private_cgoo_converges_with_large_budget_and_vmaps_over_budgets():
    L = _grid_losses(M=40, K=2, seed=5)
    eta = np.array([0.2, 0.25])
    lp = optimize.linprog(L.sum(1), A_ub=L.T, b_ub=eta, A_eq=np.ones((1, 40)), b_eq=[1.0], bounds=(0, 1))
    prob = R.CGOO(R.sum_objective(2), R.bounded_group_loss(eta, temperature=400.0), 2)
    alpha = 0.02
    G = R.penalty_weight(alpha, 2, prob.f.lipschitz)
    # one program over a budget grid: lane 0 is effectively non-private
    f = jax.jit(jax.vmap(lambda k, e, sc: R.private_cgoo(k, L, prob, G=G, steps=300, oracle_epsilon=e,
                                                         laplace_scale=sc, n=100)))
    out = f(jax.random.split(jax.random.key(1), 3), jnp.array([1e7, 1.0, 0.1]), jnp.array([0.0, 0.1, 1.0]))
    assert out.objective.shape == (3,) and bool(jnp.all(jnp.isfinite(out.objective)))
    # lane 0 equals a NumPy follow-the-mixture-gradient loop (FW with step 1/(t+1), exact oracle)
    Ld, t = L.astype(np.float64), 400.0
    pts, idx = [Ld[0]], []
    for _ in range(300):
        p = np.mean(pts, axis=0)
        z = t * (p - eta)
        gval = (np.log(np.exp(z - z.max()).sum()) + z.max()) / t
        r = 1.0 + G * (gval >= 0) * np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        idx.append(int(np.argmin(Ld @ r)))
        pts.append(Ld[idx[-1]])
    agree = np.mean(np.asarray(out.indices[0]) == np.asarray(idx))
    assert agree >= 0.95, agree
    # and it approaches the LP optimum of the CGOO (Cor. 4.2 target alpha, slack for the 1/t rate)
    assert float(out.objective[0]) <= lp.fun + 2 * alpha
    assert float(jnp.max(out.loss[0] - eta)) <= alpha
    single = R.private_cgoo(jax.random.split(jax.random.key(1), 3)[1], L, prob, G=G, steps=300,
                            oracle_epsilon=1.0, laplace_scale=0.1, n=100)
    np.testing.assert_array_equal(np.asarray(single.indices), np.asarray(out.indices[1]))
    lit = R.private_cgoo(jax.random.key(0), L, prob, G=G, steps=10, oracle_epsilon=1.0, laplace_scale=0.0,
                         n=100, variant="paper")
    np.testing.assert_allclose(np.asarray(lit.weights), 0.1, rtol=1e-6)


def test_validation_errors_name_the_argument():
    prob = _problem()
    with pytest.raises(ValueError, match="losses"):
        R.exponential_sampling(jax.random.key(0), np.full((3, 2), 1.5), prob, G=1.0, epsilon=1.0, n=10)
    with pytest.raises(ValueError, match="epsilon"):
        R.exponential_sampling(jax.random.key(0), _grid_losses(), prob, G=1.0, epsilon=0.0, n=10)
    with pytest.raises(ValueError, match="num_groups"):
        R.exponential_sampling(jax.random.key(0), np.zeros((3, 4)), prob, G=1.0, epsilon=1.0, n=10)
    with pytest.raises(ValueError, match="group_weights"):
        R.weighted_least_squares(np.zeros((4, 2)), np.zeros(4), np.zeros(4, int), np.array([-1.0, 1.0]),
                                 num_groups=2)
    with pytest.raises(ValueError, match="variant"):
        R.frank_wolfe(_grid_losses(), prob, G=1.0, steps=3, variant="bogus")
    with pytest.raises(ValueError, match="weight_fraction"):
        R.algorithm2_budget(1.0, 1e-5, 5, n=10, num_groups=2, weight_fraction=1.5)
    with pytest.raises(ValueError, match="n"):
        R.gini_constraint(0.1, 3, variant="paper")


@pytest.mark.slow
def test_private_cgoo_regression_nonprivate_limit_and_budget_grid():
    rng = np.random.default_rng(7)
    n = 500
    s = (np.arange(n) < 100).astype(np.int32)
    x = rng.normal(size=(n, 1)).astype(np.float32)
    y = (np.where(s == 1, -1.0, 1.0) * x[:, 0] + 0.5 * s + 0.3 * rng.normal(size=n)).astype(np.float32)
    p = R.weighted_least_squares(x, y, s, np.array([1.0, 1.0]), num_groups=2)
    l0 = np.asarray(R.clipped_group_losses(p, x, y, s, 2, 4.0))
    eta = np.array([0.8, 0.5 * l0[1]], np.float32)  # halve group 1's unconstrained loss
    prob = R.CGOO(R.sum_objective(2), R.bounded_group_loss(eta), 2)
    G = R.penalty_weight(0.05, 2, prob.f.lipschitz)
    kw = dict(G=G, steps=8, loss_bound=4.0, oracle_steps=40, clip_norm=2.0, learning_rate=0.5, radius=3.0)
    res = R.private_cgoo_regression(jax.random.key(0), x, y, s, prob, oracle_noise_std=0.0, laplace_scale=0.0, **kw)
    assert float(prob.g(res.loss)) <= 0.25 * (l0[1] - eta[1])  # most of the violation is removed
    assert float(prob.g(jnp.asarray(l0))) > 0
    b = R.algorithm2_budget(3.0, 1e-6, 8, n=n, num_groups=2, oracle="approximate")
    assert R.algorithm2_ledger(b)["epsilon"] == pytest.approx(3.0, rel=1e-9)
    sd = R.dp_gd_noise_std(b.oracle_epsilon, b.oracle_delta, 40, 2.0)
    run = jax.jit(jax.vmap(lambda k, z, sc: R.private_cgoo_regression(k, x, y, s, prob, oracle_noise_std=z,
                                                                      laplace_scale=sc, **kw).loss))
    out = run(jax.random.split(jax.random.key(1), 2), jnp.array([0.0, sd]), jnp.array([0.0, b.laplace_scale]))
    assert out.shape == (2, 2) and bool(jnp.all(jnp.isfinite(out)))
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(
        R.private_cgoo_regression(jax.random.split(jax.random.key(1), 2)[0], x, y, s, prob, oracle_noise_std=0.0,
                                  laplace_scale=0.0, **kw).loss), rtol=1e-4, atol=1e-6)
