"""Tests for dpfair_jax.algorithms.budget_tailoring (paper 000: DPSE / DPNoSE)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.algorithms.budget_tailoring import formulas as pf


def _two_groups(n1=400, n2=40, slopes=(-1.0, 1.0), sd=1.0, seed=0, d=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n1 + n2, d))
    s = np.r_[np.zeros(n1, int), np.ones(n2, int)]
    beta = np.asarray(slopes)[s]
    y = beta * x[:, 0] + sd * rng.normal(size=n1 + n2)
    return make_dataset(x, y.astype(np.float32), s, num_classes=0)


def _zero_data(sizes=(300, 30, 60), d=2):
    s = np.repeat(np.arange(len(sizes)), sizes)
    x = np.ones((len(s), d)) / math.sqrt(d)
    return make_dataset(x, np.zeros(len(s), np.float32), s, num_classes=0)


# ---------------------------------------------------------------- accounting and the ledger


@settings(max_examples=25, deadline=None)
@given(
    rho=st.floats(1e-3, 100.0),
    raw=st.lists(st.floats(0.01, 10.0), min_size=1, max_size=8),
    method=st.sampled_from(["dpse", "equal", "pooled"]),
    fairness=st.booleans(),
)
def test_ledger_sums_to_rho(rho, raw, method, fairness):
    if method == "pooled":
        fairness = False
    se = np.sqrt(np.asarray(raw) / np.sum(raw))
    led = bt.budget_ledger(rho, se, config=bt.Config(method=method, fairness=fairness))
    led.assert_total(rho)


def test_ledger_rejects_unnormalised_allocation():
    led = bt.budget_ledger(2.0, np.array([0.9, 0.9]), config=bt.Config())
    with pytest.raises(AssertionError):
        led.assert_total(2.0)


def test_realised_spend_adds_up_to_rho_over_many_runs():
    data = _two_groups()
    rhos = jnp.array([0.005, 0.5, 8.0, 50.0])
    keys = jax.random.split(jax.random.key(1), 4)
    cfg = bt.Config(steps=5)

    @jax.jit
    @jax.vmap
    def run(k, r):
        return bt.fit_arrays(k, data.x, data.y, data.s, 2, bt.Hyperparams(rho=r), cfg)[1]

    diag = run(keys, rhos)
    np.testing.assert_allclose(diag.rho_stage1 + diag.rho_stage2, rhos, rtol=1e-5)
    led = bt.budget_ledger(np.asarray(rhos), np.asarray(diag.se), config=cfg)
    led.assert_total(np.asarray(rhos), rtol=1e-5)  # a float32 allocation


def test_privacy_conversion_matches_closed_form():
    # Values from the engineering notes (epsilon = rho + 2 sqrt(rho log 1/delta), delta = 1e-5).
    from dpfair_jax.privacy.accounting import zcdp_to_dp

    eps = zcdp_to_dp(np.array([0.005, 0.5, 12.5]), 1e-5, method="bun_steinke")
    np.testing.assert_allclose(eps, [0.485, 5.30, 36.5], rtol=1e-3)
    spend = bt.spend(bt.Config(), (5, 5), bt.Hyperparams(rho=2.0))
    assert spend.relation == "replace_one_within_group" and spend.rho == 2.0
    assert "public" in spend.notes and "same group" in spend.notes
    spend_ar = bt.spend(bt.Config(relation="add_remove"), (5, 5), bt.Hyperparams(rho=2.0))
    assert spend_ar.relation == "add_remove" and "noisy counts" in spend_ar.notes
    assert spend.epsilon == pytest.approx(zcdp_to_dp(2.0, 1e-5, method="bun_steinke"), rel=1e-9)


# ---------------------------------------------------------------- noise calibration


@pytest.mark.parametrize("fairness", [False, True])
def test_noise_per_group_has_the_implied_std(fairness):
    """Zero data signal: M1 is pure noise; its std per group matches mu s_k^2 / T (or /2T)."""
    data = _zero_data()
    sizes = np.array([300.0, 30.0, 60.0])
    se = np.sqrt(np.array([0.2, 0.5, 0.3]))
    rho, steps, clip = 3.0, 20, 2.0
    hp = bt.Hyperparams(rho=rho, clip=clip)
    cfg = bt.Config(method="equal", fairness=fairness, steps=steps)  # mu = rho
    reps = 4000
    keys = jax.random.split(jax.random.key(2), reps)
    release = jax.jit(jax.vmap(lambda k: bt.noisy_group_release(k, data, jnp.zeros(2), se, hp, cfg)))
    m1, m2 = release(keys)
    share = rho * se**2 / steps / (2 if fairness else 1)
    # replace-one (default): gradient-sum sensitivity 2 Delta; loss sums in [0, Delta^2]: Delta^2
    want = 2 * clip / np.sqrt(2 * share) / sizes  # std of the normalised noisy gradient sum
    got = np.asarray(m1).std(axis=0)  # [P, K]
    tol = 4 * want / np.sqrt(2 * reps)  # 4 standard errors of a sample std
    assert np.all(np.abs(got - want) < tol)
    if fairness:
        want_l = clip**2 / np.sqrt(2 * share) / sizes
        assert np.all(np.abs(np.asarray(m2).std(axis=0) - want_l) < 4 * want_l / np.sqrt(2 * reps))


@pytest.mark.slow
def test_replace_one_doubles_gradient_noise_and_pooled_uses_whole_budget():
    se = jnp.array([0.6, 0.8])
    g1, l1 = bt.group_noise_stds(se, 1.0, 10, 2.0, fairness=True, relation="add_remove")
    g2, l2 = bt.group_noise_stds(se, 1.0, 10, 2.0, fairness=True, relation="replace_one")
    np.testing.assert_allclose(g2, 2 * g1, rtol=1e-6)  # clipped vector sum: 2 Delta vs Delta
    np.testing.assert_allclose(l2, l1, rtol=1e-6)  # sum of values in [0, Delta^2]: Delta^2 both
    g1, _ = bt.group_noise_stds(se, 1.0, 10, 2.0, relation="add_remove")
    np.testing.assert_allclose(g1, 2.0 * np.sqrt(10 / (2 * np.array([0.36, 0.64]))), rtol=1e-6)
    data = _zero_data(sizes=(50, 50), d=1)
    cfg = bt.Config(method="pooled", steps=10)
    keys = jax.random.split(jax.random.key(3), 4000)
    m1 = jax.vmap(lambda k: bt.noisy_group_release(k, data, jnp.zeros(1), se,
                                                   bt.Hyperparams(rho=1.0), cfg)[0])(keys)
    want = 2 * 2.0 * np.sqrt(10 / 2.0) / 100  # sigma = 2 Delta sqrt(T/(2 rho)), divided by n
    assert abs(float(np.std(m1)) - want) < 4 * want / np.sqrt(8000)


def test_end_to_end_first_step_noise():
    """One step from theta = 0 on zero data: theta_1 = -lr * sum_k noise_k / n_k."""
    data = _zero_data(sizes=(200, 20), d=1)
    hp = bt.Hyperparams(rho=2.0, learning_rate=1.0)
    cfg = bt.Config(method="equal", steps=1, box=float("inf"))
    keys = jax.random.split(jax.random.key(4), 4000)
    th = jax.jit(jax.vmap(lambda k: bt.fit(k, data, hp, cfg)[0]))(keys)
    std_k = 2 * 2.0 * np.sqrt(1 / (2 * 2.0 * 0.5))  # replace-one: 2 Delta sqrt(T/(2 mu s_k^2))
    want = np.sqrt(np.sum((std_k / np.array([200.0, 20.0])) ** 2))
    got = float(np.std(th))
    assert abs(got - want) < 4 * want / np.sqrt(8000)


def test_paper_scaling_is_the_unnormalised_sum():
    data = _zero_data(sizes=(100, 10), d=1)
    se = np.array([0.6, 0.8])
    keys = jax.random.split(jax.random.key(5), 3000)
    hp = bt.Hyperparams(rho=1.0)
    cfg = bt.Config(method="equal", steps=4, scaling="paper")
    m1 = jax.vmap(lambda k: bt.noisy_group_release(k, data, jnp.zeros(1), se, hp, cfg)[0])(keys)
    want = 2 * 2.0 * np.sqrt(4 / (2 * se**2))
    assert np.all(np.abs(np.asarray(m1).std(axis=0)[0] - want) < 4 * want / np.sqrt(6000))


# ---------------------------------------------------------------- stage 1


def test_stage1_non_private_limit_matches_numpy():
    data = _two_groups(n1=500, n2=50, slopes=(-1.0, 1.0))
    hp = bt.Hyperparams(rho=jnp.inf, clip=2.0, stats_bound_x=100.0, stats_bound_y=100.0)
    se, fallback, beta = bt.stage1_standard_errors(jax.random.key(0), data, hp)
    x, y, s = np.asarray(data.x, float), np.asarray(data.y, float), np.asarray(data.s)
    b = np.linalg.lstsq(x, y, rcond=None)[0]
    r2 = np.minimum((y - x @ b) ** 2, 4.0)
    ref = np.sqrt(np.bincount(s, weights=r2) / np.bincount(s))
    ref = ref / np.linalg.norm(ref)
    assert not bool(fallback)
    np.testing.assert_allclose(beta, b, rtol=1e-3)
    np.testing.assert_allclose(se, ref, rtol=1e-3)
    assert se[1] > se[0]  # the minority group (other slope) has the larger residuals


def test_stage1_fallback_is_branch_free_and_returns_equal_split():
    data = _two_groups(n1=60, n2=6)
    rhos = jnp.full((64,), 1e-6)
    keys = jax.random.split(jax.random.key(6), 64)
    se, fb, _ = jax.jit(jax.vmap(lambda k, r: bt.stage1_standard_errors(
        k, data, bt.Hyperparams(rho=r))))(keys, rhos)
    fb = np.asarray(fb)
    assert fb.any()  # at this budget the noisy X^T X or a residual sum is often <= 0
    np.testing.assert_allclose(np.asarray(se)[fb], 1 / np.sqrt(2), rtol=1e-6)
    np.testing.assert_allclose(np.sum(np.asarray(se) ** 2, axis=1), 1.0, rtol=1e-5)


# ---------------------------------------------------------------- stage 2 limits


@pytest.mark.parametrize("method,weighting", [("dpse", "group_mean"), ("equal", "group_mean"),
                                              ("pooled", "pooled")])
def test_rho_to_infinity_converges_to_least_squares(method, weighting):
    data = _two_groups(n1=300, n2=30, slopes=(-1.0, 2.0), d=2)
    ref = bt.least_squares(data, weighting=weighting)
    lr = 0.2 if weighting == "group_mean" else 0.4
    cfg = bt.Config(method=method, steps=300, box=float("inf"))
    for rho in (jnp.inf, 1e20):
        hp = bt.Hyperparams(rho=rho, clip=1e6, learning_rate=lr)
        theta, diag, *_ = bt.fit(jax.random.key(7), data, hp, cfg)
        np.testing.assert_allclose(theta, ref, atol=2e-3)
        assert float(diag["fraction_clipped"]) == 0.0


def test_fairness_lagrangian_non_private_limit():
    """G = 1, g = max_k (l_k - eta): with eta huge the constraint is off (minimiser of the sum of
    group means, weighted LS); with eta = 0 the iterates approach the minimiser of
    l_1 + l_2 + max(l_1, l_2), found here by a NumPy grid search (constant-step subgradient descent
    oscillates around the kink with an amplitude proportional to the step)."""
    data = _two_groups(n1=300, n2=30, slopes=(-1.0, 2.0))
    hp = bt.Hyperparams(rho=jnp.inf, clip=1e6, learning_rate=0.1, thresholds=1e9)
    cfg = bt.Config(method="equal", fairness=True, steps=300, box=float("inf"))
    theta, *_ = bt.fit(jax.random.key(0), data, hp, cfg)
    np.testing.assert_allclose(theta, bt.least_squares(data, weighting="group_mean"), atol=2e-3)
    x, y, s = (np.asarray(a, float) for a in (data.x[:, 0], data.y, data.s))
    grid = np.linspace(-1.0, 2.0, 3001)
    losses = np.stack([((y[s == k][None] - grid[:, None] * x[s == k][None]) ** 2).mean(1)
                       for k in range(2)], axis=1)
    best = grid[np.argmin(losses.sum(1) + losses.max(1))]
    cfg2 = bt.Config(method="equal", fairness=True, steps=1500, box=float("inf"))
    theta2, *_ = bt.fit(jax.random.key(0), data, dataclasses.replace(hp, thresholds=0.0, learning_rate=0.005),
                       cfg2)
    assert abs(float(theta2[0]) - best) < 0.03
    assert abs(float(theta[0]) - best) > 0.03  # the constraint moved the solution


def test_callable_f_g_equal_named():
    data = _two_groups()
    hp = bt.Hyperparams(rho=1.0)
    a = bt.fit(jax.random.key(3), data, hp, bt.Config(fairness=True, g="bgl"))[0]
    b = bt.fit(jax.random.key(3), data, hp, bt.Config(
        fairness=True, f=lambda l: jnp.sum(l), g=lambda l, t: jnp.max(l - t)))[0]
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_projection_onto_box():
    data = _two_groups(slopes=(20.0, 20.0))
    theta, *_ = bt.fit(jax.random.key(0), data, bt.Hyperparams(rho=10.0, learning_rate=1.0),
                      bt.Config(steps=30, box=5.0))
    assert float(jnp.max(jnp.abs(theta))) <= 5.0


def test_logistic_variant_non_private_limit():
    rng = np.random.default_rng(0)
    n = 600
    x = rng.normal(size=(n, 2))
    s = (rng.random(n) < 0.2).astype(int)
    p = 1 / (1 + np.exp(-(x @ np.array([1.5, -1.0]) + 0.3)))
    y = (rng.random(n) < p).astype(int)
    data = make_dataset(x, y, s)
    cfg = bt.Config(method="pooled", loss="logistic", steps=400, fit_intercept=True,
                    box=float("inf"))
    theta, *_ = bt.fit(jax.random.key(0), data, bt.Hyperparams(rho=jnp.inf, clip=1e6,
                                                              learning_rate=2.0), cfg)
    from sklearn.linear_model import LogisticRegression

    ref = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(x, y)
    np.testing.assert_allclose(theta, np.r_[ref.coef_[0], ref.intercept_], atol=5e-3)
    # private DPSE runs end to end on the classification data
    th2, diag, *_ = bt.fit(jax.random.key(1), data, bt.Hyperparams(rho=1.0, clip=1.0),
                       bt.Config(loss="logistic", fit_intercept=True))
    assert np.all(np.isfinite(th2)) and float(diag["rho_stage1"] + diag["rho_stage2"]) == pytest.approx(1.0, rel=1e-5)


# ---------------------------------------------------------------- vectorisation


def test_jitted_vmap_over_keys_and_budgets_equals_single_calls():
    data = _two_groups(n1=200, n2=20)
    cfg = bt.Config(steps=10, fairness=True)
    keys = jax.random.split(jax.random.key(8), 6)
    rhos = jnp.array([0.01, 0.1, 1.0, 2.0, 4.5, 8.0])
    lrs = jnp.linspace(0.05, 0.3, 6)
    batch = jax.jit(jax.vmap(lambda k, r, lr: bt.fit(
        k, data, bt.Hyperparams(rho=r, learning_rate=lr), cfg)[0]))(keys, rhos, lrs)
    single_fn = jax.jit(lambda k, r, lr: bt.fit(k, data, bt.Hyperparams(rho=r, learning_rate=lr),
                                                cfg)[0])
    for i in (0, 5):
        single = single_fn(keys[i], rhos[i], lrs[i])
        np.testing.assert_allclose(batch[i], single, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs,cfg,match",
    [
        ({"rho": -1.0}, {}, "rho"),
        ({"tau_fraction": 1.5}, {}, "tau_fraction"),
        ({"learning_rate": 0.0}, {}, "learning_rate"),
        ({"clip": 0.0}, {}, "clip"),
        ({"thresholds": jnp.zeros(3)}, {}, "thresholds"),
        ({}, {"method": "magic"}, "method"),
        ({}, {"method": "pooled", "fairness": True}, "pooled"),
        ({}, {"scaling": "mean"}, "scaling"),
        ({}, {"steps": 0}, "steps"),
    ],
)
def test_validation_names_the_argument(kwargs, cfg, match):
    data = _two_groups(n1=20, n2=5)
    with pytest.raises(ValueError, match=match):
        bt.fit(jax.random.key(0), data, bt.Hyperparams(**kwargs), bt.Config(**cfg))


def test_rbg_key_refused():
    data = _two_groups(n1=20, n2=5)
    with pytest.raises(ValueError, match="threefry"):
        bt.fit(jax.random.key(0, impl="rbg"), data, bt.Hyperparams(), bt.Config())


def test_noise_and_ledger_agree_with_paper_formulas():
    """Cross-check against the independent closed forms in budget_tailoring.formulas."""
    se = np.sqrt(np.array([0.1, 0.2, 0.7]))
    for fair, alg in ((False, 3), (True, 2)):
        g, lo = bt.group_noise_stds(jnp.asarray(se), 1.6, 40, 2.0, fairness=fair)
        # replace-one: gradient sums 2 Delta = 4, losses in [0, Delta^2]: Delta^2 = 4
        ref = pf.stage2_noise_stds(1.6, se, 40, grad_sensitivity=4.0,
                                   loss_sensitivity=4.0 if fair else None, algorithm=alg)
        np.testing.assert_allclose(g, ref.grad_std, rtol=1e-5)
        if fair:
            np.testing.assert_allclose(lo, ref.loss_std, rtol=1e-5)
        mine = bt.budget_ledger(2.0, se, config=bt.Config(fairness=fair, steps=40))
        theirs = pf.budget_tailoring_ledger(2.0, se, 40, algorithm=alg)
        assert mine.total == pytest.approx(theirs.total, rel=1e-9)
    pooled = pf.dpnose_noise_stds(3.0, 40, 3, grad_sensitivity=4.0, variant="pooled")
    mine = 2 * 2.0 * np.sqrt(40 / (2 * 3.0))
    np.testing.assert_allclose(mine, pooled[0], rtol=1e-9)


@pytest.mark.parametrize("fairness", [False, True])
def test_scalar_fast_path_equals_general_path(fairness):
    """One feature uses the scalar clamp; a zero second feature forces the general path with the
    same clipping and predictions (no noise, so the two runs are comparable)."""
    data = _two_groups(n1=200, n2=20, slopes=(-3.0, 4.0))
    x2 = np.c_[np.asarray(data.x), np.zeros(len(data.y))]
    data2 = make_dataset(x2, np.asarray(data.y), np.asarray(data.s), num_classes=0)
    hp = bt.Hyperparams(rho=jnp.inf, clip=2.0, learning_rate=0.1)
    cfg = bt.Config(method="equal", fairness=fairness, steps=30)
    a, da, *_ = bt.fit(jax.random.key(0), data, hp, cfg)
    b, db, *_ = bt.fit(jax.random.key(0), data2, hp, cfg)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(da["fraction_clipped"], db["fraction_clipped"], rtol=1e-6)
    assert 0.05 < float(da["fraction_clipped"]) < 1.0  # clipping is active


# ---------------------------------------------------------------- exact clipped-sum table


def _direct_sums64(x, y, s, w, k, clip, theta):
    """Float64 reference: per-group clipped gradient, loss and clipped-count sums at theta."""
    x, y, w = (np.asarray(a, np.float64) for a in (x, y, w))
    g = 2.0 * (theta * x - y) * x
    out = []
    for vals in (np.clip(g, -clip, clip), np.minimum((theta * x - y) ** 2, clip**2),
                 (np.abs(g) > clip).astype(float)):
        out.append(np.bincount(s, weights=w * vals, minlength=k))
    return out


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), clip=st.floats(0.1, 10.0), k=st.integers(1, 4),
       slope=st.floats(-20.0, 20.0))
@pytest.mark.slow
def test_clipped_sum_table_equals_direct_sums(seed, clip, k, slope):
    """The tabulated piecewise sums equal a float64 sum over the examples at any theta (inside
    and outside the data's breakpoints), with masked rows, x = 0 rows and ties. Tolerance: float32
    rounding of prefix sums, ~1e-6 of the largest absolute term sum."""
    rng = np.random.default_rng(seed)
    n = 257
    x = rng.normal(size=n).astype(np.float32)
    x[:3] = 0.0
    x[3:6] = x[6]  # ties
    s = rng.integers(0, k, size=n)
    y = (slope * x + rng.normal(size=n)).astype(np.float32)
    w = (rng.random(n) > 0.1).astype(np.float32)
    onehot = jax.nn.one_hot(s, k) * w[:, None]
    table = jax.jit(bt.clipped_sum_table)(x, y, onehot, clip)
    thetas = np.r_[rng.uniform(-30, 30, size=12), 0.0, slope]
    sums = jax.jit(jax.vmap(lambda t: bt.table_group_sums(table, t)))(jnp.asarray(thetas, jnp.float32))
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    for i, th in enumerate(thetas.astype(np.float32).astype(np.float64)):
        ref = _direct_sums64(x, y, s, w, k, clip, th)
        scale_g = np.sum(np.abs(th * 2 * xd * xd) + np.abs(2 * xd * yd)) + clip * n
        scale_l = np.sum((th * xd) ** 2 + yd**2) + clip**2 * n
        np.testing.assert_allclose(sums[0][i], ref[0], atol=1e-6 * scale_g)
        np.testing.assert_allclose(sums[1][i], ref[1], atol=1e-6 * scale_l)
        np.testing.assert_allclose(sums[2][i], ref[2], atol=1e-6 * n)


@pytest.mark.parametrize("fairness", [False, True])
def test_table_runs_equal_direct_runs(fairness):
    """fit_many_prepared with the table equals the direct path (same draws): stage 1 (residual
    sums from the table), noisy descent, fraction clipped, for every method."""
    data = _two_groups(n1=500, n2=25, slopes=(-10.0, 10.0))
    cfgs = tuple(bt.Config(method=m, fairness=fairness, steps=25)
                 for m in (("dpse", "equal") if fairness else ("dpse", "equal", "pooled")))
    draws = jax.random.normal(jax.random.key(2), (len(cfgs), bt.num_draws(25, 1, 2)))
    run = jax.jit(lambda mode, rho: bt.fit_many_prepared(
        draws, bt.prepare(data.x, data.y, data.s, 2, cfgs[0], clip=2.0, clipped_sums=mode),
        bt.Hyperparams(rho=rho, clip=2.0), cfgs), static_argnums=0)
    for rho in (0.5, 8.0, np.inf):
        a, da = run("table", rho)
        b, db = run("direct", rho)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(da.se, db.se, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(da.fraction_clipped, db.fraction_clipped, atol=1e-3)
        assert bool(jnp.all(da.fraction_clipped > 0.01))  # clipping is active


@pytest.mark.slow
def test_prepare_table_needs_scalar_ols_and_matching_clip():
    data = _two_groups(d=2)
    with pytest.raises(ValueError, match="one feature"):
        bt.prepare(data.x, data.y, data.s, 2, bt.Config(), clip=2.0, clipped_sums="table")
    one = _two_groups()
    assert bt.prepare(one.x, one.y, one.s, 2, bt.Config(), clip=2.0).table is not None
    assert bt.prepare(one.x, one.y, one.s, 2, bt.Config()).table is None  # no clip: direct
    assert bt.prepare(one.x, one.y, one.s, 2, bt.Config(fit_intercept=True), clip=2.0).table is None
    prep = bt.prepare(one.x, one.y, one.s, 2, bt.Config(), clip=2.0)
    draws = jnp.zeros((1, bt.num_draws(50, 1, 2)))
    with pytest.raises(ValueError, match="differs from the clip"):
        bt.fit_many_prepared(draws, prep, bt.Hyperparams(clip=1.0), (bt.Config(),))
    with pytest.raises(ValueError, match="clipped_sums"):
        bt.prepare(one.x, one.y, one.s, 2, bt.Config(), clip=2.0, clipped_sums="fast")


def test_clipped_sum_table_restricted_to_a_domain():
    """With domain=(lo, hi) the sums are exact to float32 rounding for theta in the domain,
    although most breakpoints lie outside it (the paper-000 100x design: slopes -10 / 10, the
    centres y/x near -+10). Tolerances: ~2 float32 ulps of the summed magnitudes (gradients) and
    1e-6 of them (losses, whose coefficients cancel); merging the ~18,000 out-of-domain
    breakpoints into one rank by a sequential scatter-add gives ~5x these errors and fails."""
    rng = np.random.default_rng(3)
    n, k, clip = 10_100, 2, 2.0
    x = rng.normal(size=n).astype(np.float32)
    s = (np.arange(n) >= 10_000).astype(int)
    y = (np.where(s == 0, -10.0, 10.0) * x + rng.normal(size=n)).astype(np.float32)
    w = np.ones(n, np.float32)
    onehot = jax.nn.one_hot(s, k)
    table = jax.jit(lambda a, b, o: bt.clipped_sum_table(a, b, o, clip, domain=(-5.0, 5.0)))(x, y, onehot)
    thetas = np.r_[-5.0, 5.0, np.linspace(-5, 5, 41)].astype(np.float32)
    sums = jax.jit(jax.vmap(lambda t: bt.table_group_sums(table, t)))(jnp.asarray(thetas))
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    for i, th in enumerate(thetas.astype(np.float64)):
        ref = _direct_sums64(x, y, s, w, k, clip, th)
        scale_g = np.sum(np.abs(th * 2 * xd * xd) + np.abs(2 * xd * yd)) + clip * n
        scale_l = np.sum((th * xd) ** 2 + yd**2) + clip**2 * n
        np.testing.assert_allclose(sums[0][i], ref[0], atol=1e-7 * scale_g)
        np.testing.assert_allclose(sums[1][i], ref[1], atol=1e-6 * scale_l)
        np.testing.assert_allclose(sums[2][i], ref[2], atol=0.5)
    # outside the domain the table is not valid (documented): it differs there
    out = bt.table_group_sums(table, 9.0)[0]
    assert not np.allclose(out, _direct_sums64(x, y, s, w, k, clip, 9.0)[0], rtol=1e-3)
