"""Privacy of budget tailoring (paper 000): neighbouring relations, noise scales, spends, audits.

Every noise std is compared with a sigma written out by hand from the paper's derivation
(``sigma = sensitivity / sqrt(2 * budget)``, Bun & Steinke Lemma 2.5) on data whose clean
statistics are zero, from many keys in one vmapped call; the tolerance is 4 standard errors of a
sample std (``sigma / sqrt(2 N)``). The sensitivity tests compute the noise-free release on two
neighbouring datasets and compare the shift with the sensitivity the noise is calibrated to
(``shift / std <= sqrt(2 rho)`` for a ``rho``-zCDP Gaussian release, equal stds in both worlds).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.audit import budget_tailoring_games as G
from dpfair_jax.audit.games import audit_mechanism
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.privacy.relations import ADD_REMOVE

REPS = 4000
TOL = 4.0 / math.sqrt(2 * REPS)  # 4 standard errors of a sample std, relative


def _default_relation(cfg) -> str:
    """The relation a config runs under (also readable from the former ``neighbour`` field)."""
    rel = getattr(cfg, "relation", None) or getattr(cfg, "neighbour")
    return "replace_one_within_group" if rel in ("swap", "replace_one") else rel


def _keys(seed: int, n: int = REPS):
    return jax.random.split(jax.random.key(seed), n)


# ---------------------------------------------------------------- item 2: the default release


def test_default_stage2_release_moves_by_at_most_its_calibrated_sensitivity():
    """The default configuration's stage-2 release on neighbours under its own relation: the
    noise-free group-0 release (rho = inf) moves by at most sqrt(2 rho_0) noise stds, rho_0 the
    ledger's per-iteration charge of group 0, and the noise std is the same in both worlds.

    Group 0 has a non-zero mean (3 rows with clipped gradient -Delta); the canary's gradient is
    +Delta. With the former default (add/remove, exact n_k as denominator) the mean moves by
    2 Delta / (n + 1) while the noise is calibrated to Delta / n, and the stds differ by n/(n+1):
    this test fails there (shift 1.5 sqrt(2 rho_0), stds 25% apart)."""
    cfg = bt.Config()
    rel = _default_relation(cfg)
    x = np.r_[np.full(3, 100.0), np.linspace(-1, 1, 10), 100.0][:, None].astype(np.float32)
    y = np.r_[np.ones(3), np.linspace(1, -1, 10), -1.0].astype(np.float32)  # canary: y = -1
    s = np.r_[np.zeros(3), np.ones(10), 0].astype(np.int32)
    d1 = make_dataset(x, y, s, num_classes=0)
    if rel == "replace_one_within_group":  # the canary replaced by another row of group 0
        d0 = make_dataset(x, np.r_[y[:-1], 1.0].astype(np.float32), s, num_classes=0)
    else:
        d0 = make_dataset(x, y, s, num_classes=0, mask=np.r_[np.ones(13), 0.0].astype(np.float32))
    se = jnp.sqrt(jnp.array([0.5, 0.5]))
    rho, clip = 40.0, 1.0
    theta = jnp.zeros(1)

    def release(d):  # one program per world: first key noise-free (rho = inf), then REPS noisy
        hp = bt.Hyperparams(clip=clip)
        out = jax.jit(jax.vmap(lambda k, r: bt.noisy_group_release(
            k, d, theta, se, dataclasses.replace(hp, rho=r), cfg)[0][0, 0]))(
                _keys(1, REPS + 1), jnp.r_[jnp.inf, jnp.full(REPS, rho)])
        return float(out[0]), float(np.std(out[1:]))

    (clean0, std0), (clean1, std1) = release(d0), release(d1)
    clean, stds = [clean0, clean1], [std0, std1]
    led = bt.budget_ledger(rho, np.asarray(se), config=cfg)
    rho_0 = float(led.charges["stage2/grad[0]"]) / cfg.steps
    assert abs(clean[0] - clean[1]) > 0  # the canary moves the release
    assert abs(stds[0] - stds[1]) < 2 * TOL * max(stds), stds
    shift = abs(clean[1] - clean[0]) / min(stds)
    assert shift <= math.sqrt(2 * rho_0) * (1 + TOL), (shift, math.sqrt(2 * rho_0))


# ---------------------------------------------------------------- item 4: stage1_clip="paper"


def test_stage1_paper_clip_noise_covers_a_clip_below_one():
    """``stage1_clip="paper"`` with Delta = 0.5: squared residuals in [0, Delta], so one record
    moves group 0's residual sum by Delta > Delta^2. Read back from the released allocation, the
    noise-free sum moves by at most sqrt(2 tau_k) noise stds (tau_k the ledger's charge of that
    release). The former noise (for Delta^2) fails: the shift is 2 sqrt(2 tau_k) stds."""
    clip, n0, n1 = 0.5, 5, 2000
    cfg = bt.Config(stage1_clip="paper")
    rel = _default_relation(cfg)
    rng = np.random.default_rng(0)
    x = np.zeros((n0 + n1 + 1, 1), np.float32)
    y = np.zeros(n0 + n1 + 1, np.float32)
    y[:n0] = 10.0  # x = 0: residual 10 whatever the pooled fit, clipped to Delta
    x[n0:n0 + n1, 0] = 3.0 * rng.choice([-1.0, 1.0], n1)
    y[n0:n0 + n1] = 1000.0 * rng.choice([-1.0, 1.0], n1)  # all clipped: S_1 = n1 Delta
    s = np.r_[np.zeros(n0), np.ones(n1), 0].astype(np.int32)
    y1 = y.copy()
    y1[-1] = 10.0  # the canary
    d1 = make_dataset(x, y1, s, num_classes=0)
    if rel == "replace_one_within_group":
        d0, sizes = make_dataset(x, y, s, num_classes=0), (n0 + 1, n0 + 1)
    else:
        d0 = make_dataset(x, y1, s, num_classes=0, mask=np.r_[np.ones(n0 + n1), 0.0].astype(np.float32))
        sizes = (n0, n0 + 1)
    rho = 7.5  # tau = 1.5, tau_k = 0.5

    def s0(d, size):  # S_0 from the released se: (se_0/se_1)^2 n_0 S_1/n_1 with S_1/n_1 = Delta
        hp = bt.Hyperparams(clip=clip)
        se = jax.jit(jax.vmap(lambda k, r: bt.stage1_standard_errors(k, d, dataclasses.replace(hp, rho=r), cfg)[0]))(
            _keys(3, REPS + 1), jnp.r_[jnp.inf, jnp.full(REPS, rho)])  # first: noise-free
        out = np.asarray((se[:, 0] / se[:, 1]) ** 2 * size * clip, np.float64)
        return float(out[0]), float(np.std(out[1:]))

    (clean0, std0), (clean1, std1) = (s0(d, n) for d, n in zip((d0, d1), sizes))
    clean, stds = [clean0, clean1], [std0, std1]
    np.testing.assert_allclose(clean[1] - clean[0], clip, rtol=1e-4)  # sensitivity Delta
    tau_k = float(bt.budget_ledger(rho, [0.6, 0.8], config=cfg).charges["stage1/se[0]"])
    assert abs(stds[0] - stds[1]) < 2 * TOL * max(stds), stds
    shift = (clean[1] - clean[0]) / min(stds)
    assert shift <= math.sqrt(2 * tau_k) * (1 + TOL), (shift, math.sqrt(2 * tau_k))


# ---------------------------------------------------------------- noise scales by hand


@pytest.mark.parametrize("relation,stage1_clip,clip", [
    ("replace_one_within_group", "delta_sq", 0.5), ("replace_one_within_group", "paper", 0.5),
    ("replace_one_within_group", "paper", 2.0),
    ("add_remove", "delta_sq", 2.0), ("add_remove", "paper", 0.5)])
def test_stage1_noise_stds_by_hand(relation, stage1_clip, clip):
    """Algorithm 1 on zero data (x = 0, y = 0: X^T X, X^T y and every residual are 0, so each
    release is its noise). tau = 0.2 rho (of (1 - count_fraction) rho under add/remove),
    tau_k = tau / (K + 1); X^T X and X^T y get tau_k / 2 each: std = sens / sqrt(tau_k), with
    sens = U_x^2 and U_x U_y (add/remove) or sqrt(2) U_x^2 and 2 U_x U_y (replace-one); the residual
    sums get tau_k: std = B / sqrt(2 tau_k), B = Delta^2 or, for the literal clip to [0, Delta],
    max(Delta, Delta^2)."""
    sizes, p = (40, 20, 30), 2
    s = np.repeat(np.arange(3), sizes)
    data = make_dataset(np.zeros((len(s), p)), np.zeros(len(s), np.float32), s, num_classes=0)
    rho, ux, uy, cf = 3.0, 1.5, 4.0, 0.1
    hp = bt.Hyperparams(rho=rho, clip=clip, stats_bound_x=ux, stats_bound_y=uy, count_fraction=cf)
    cfg = bt.Config(relation=relation, stage1_clip=stage1_clip)
    rel = jax.jit(jax.vmap(lambda k: bt.stage1_release(k, data, hp, cfg)))(_keys(7))
    tau = 0.2 * rho * ((1 - cf) if relation == "add_remove" else 1.0)
    tau_k = tau / 4
    replace = relation == "replace_one_within_group"
    want_xx = (math.sqrt(2) if replace else 1.0) * ux**2 / math.sqrt(tau_k)
    want_xy = (2.0 if replace else 1.0) * ux * uy / math.sqrt(tau_k)
    bound = clip**2 if stage1_clip == "delta_sq" else max(clip, clip**2)
    want_res = bound / math.sqrt(2 * tau_k)
    xtx = np.asarray(rel.xtx)
    np.testing.assert_array_equal(xtx[:, 0, 1], xtx[:, 1, 0])  # symmetric noise
    for got, want in [(xtx[:, 0, 0], want_xx), (xtx[:, 1, 1], want_xx), (xtx[:, 0, 1], want_xx),
                      (np.asarray(rel.xty)[:, 0], want_xy), (np.asarray(rel.xty)[:, 1], want_xy)]:
        assert abs(np.std(got) / want - 1) < TOL, (np.std(got), want)
    res = np.asarray(rel.residual_sums)
    assert np.all(np.abs(res.std(axis=0) / want_res - 1) < TOL), (res.std(axis=0), want_res)
    # the library's own stds are the same numbers
    got = bt.stage1_noise_stds(tau, 3, hp, cfg)
    np.testing.assert_allclose([float(g) for g in got], [want_xx, want_xy, want_res], rtol=1e-6)


@pytest.mark.parametrize("relation,scaling", [("replace_one_within_group", "group_mean"), ("add_remove", "paper")])
@pytest.mark.parametrize("fairness", [False, True])
def test_stage2_noise_stds_by_hand(relation, scaling, fairness):
    """One stage-2 release on zero data (every clipped sum is 0): group k's budget per iteration
    is mu_T = mu s_k^2 / T (Algorithm 3), halved between gradient and loss in Algorithm 2; the
    gradient sum's std is sens_g / sqrt(2 mu_T) with sens_g = 2 Delta (replace-one within the
    group) or Delta (add/remove), the loss sum's Delta^2 / sqrt(2 mu_T) (values in [0, Delta^2]).
    The default scaling divides noise and sum by the public n_k; the literal Algorithm 3 / 2
    (``scaling="paper"``) keeps the noise at the sum's scale, which makes the add/remove check
    exact although its denominators are noisy counts."""
    sizes = np.array([300, 30, 60])
    s = np.repeat(np.arange(3), sizes)
    data = make_dataset(np.ones((len(s), 2)) / math.sqrt(2), np.zeros(len(s), np.float32), s,
                        num_classes=0)
    shares = np.array([0.2, 0.5, 0.3])
    se = jnp.asarray(np.sqrt(shares))
    rho, steps, clip, cf = 3.0, 20, 2.0, 0.1
    hp = bt.Hyperparams(rho=rho, clip=clip, count_fraction=cf)
    cfg = bt.Config(method="equal", fairness=fairness, steps=steps, relation=relation,
                    scaling=scaling)
    m1, m2 = jax.jit(jax.vmap(lambda k: bt.noisy_group_release(k, data, jnp.zeros(2), se, hp, cfg)))(_keys(8))
    mu = rho * ((1 - cf) if relation == "add_remove" else 1.0)  # method "equal": no stage 1
    mu_t = mu * shares / steps / (2 if fairness else 1)
    sens_g = (2.0 if relation == "replace_one_within_group" else 1.0) * clip
    div = sizes if scaling == "group_mean" else 1.0
    want_g = sens_g / np.sqrt(2 * mu_t) / div
    got_g = np.asarray(m1).std(axis=0)  # [P, K]
    assert np.all(np.abs(got_g / want_g - 1) < TOL), (got_g, want_g)
    if fairness:
        want_l = clip**2 / np.sqrt(2 * mu_t) / div
        got_l = np.asarray(m2).std(axis=0)
        assert np.all(np.abs(got_l / want_l - 1) < TOL), (got_l, want_l)
    g, lo = bt.group_noise_stds(se, mu, steps, clip, fairness=fairness, relation=relation)
    np.testing.assert_allclose(g, sens_g / np.sqrt(2 * mu_t), rtol=1e-5)
    if fairness:
        np.testing.assert_allclose(lo, clip**2 / np.sqrt(2 * mu_t), rtol=1e-5)


def test_pooled_noise_std_by_hand():
    """DPNoSE (pooled DP-GD): the whole budget mu = rho on the pooled clipped sum per iteration,
    std = 2 Delta sqrt(T / (2 rho)) (replace-one), divided by the public n."""
    data = make_dataset(np.ones((90, 1)), np.zeros(90, np.float32), np.repeat([0, 1], [60, 30]),
                        num_classes=0)
    rho, steps, clip = 2.0, 10, 1.5
    cfg = bt.Config(method="pooled", steps=steps)
    m1 = jax.jit(jax.vmap(lambda k: bt.noisy_group_release(
        k, data, jnp.zeros(1), jnp.ones(2) / math.sqrt(2), bt.Hyperparams(rho=rho, clip=clip), cfg)[0]))(_keys(9))
    want = 2 * clip * math.sqrt(steps / (2 * rho)) / 90
    assert abs(float(np.std(m1)) / want - 1) < TOL


def test_add_remove_counts_are_noised_and_charged():
    """Under add/remove the group sizes are released as n_k + N(0, 1 / (2 count_fraction rho))
    (sensitivity 1), clamped to >= 1, and charged; under replace-one they are the public sizes and
    nothing is charged for them."""
    sizes = np.array([200, 50])
    s = np.repeat([0, 1], sizes)
    data = make_dataset(np.zeros((250, 1)), np.zeros(250, np.float32), s, num_classes=0)
    rho, cf = 2.0, 0.1
    hp = bt.Hyperparams(rho=rho, count_fraction=cf)
    cfg = bt.Config(relation="add_remove", method="equal", steps=1)
    run = jax.jit(jax.vmap(lambda k, r: bt.fit(k, data, dataclasses.replace(hp, rho=r), cfg).diagnostics))
    tiny_rho = 1e-3  # count std 1 / sqrt(2e-4) = 71: the clamp to >= 1 acts
    rhos = jnp.r_[jnp.full(REPS, rho), jnp.full(200, tiny_rho)]
    both = run(_keys(10, REPS + 200), rhos)
    diag = jax.tree_util.tree_map(lambda a: a[:REPS], both)
    counts = np.asarray(diag["counts"])
    want = 1 / math.sqrt(2 * cf * rho)
    assert np.all(np.abs(counts.std(axis=0) / want - 1) < TOL)
    assert np.all(np.abs(counts.mean(axis=0) - sizes) < 4 * want / math.sqrt(REPS))
    np.testing.assert_allclose(diag["rho_counts"], cf * rho, rtol=1e-6)
    np.testing.assert_allclose(diag["rho_counts"] + diag["rho_stage1"] + diag["rho_stage2"], rho, rtol=1e-5)
    assert float(np.min(both["counts"][REPS:])) == 1.0  # noisy denominators are clamped to >= 1
    # replace-one: exact public sizes, no charge
    d1 = bt.fit(jax.random.key(0), data, hp, bt.Config(method="equal", steps=1)).diagnostics
    np.testing.assert_array_equal(d1["counts"], sizes)
    assert float(d1["rho_counts"]) == 0.0


# ---------------------------------------------------------------- spends, ledger, configuration


@pytest.mark.parametrize("method", ["dpse", "equal", "pooled"])
@pytest.mark.parametrize("relation", ["replace_one_within_group", "add_remove"])
def test_ledger_and_spend_state_what_is_spent(method, relation):
    cfg = bt.Config(method=method, relation=relation, fairness=method == "dpse")
    se = np.sqrt([0.3, 0.7])
    led = bt.budget_ledger(4.0, se, config=cfg, tau_fraction=0.25, count_fraction=0.1)
    led.assert_total(4.0, rtol=1e-12)
    assert ("counts" in led.charges) == (relation == "add_remove")
    if relation == "add_remove":
        assert float(led.charges["counts"]) == pytest.approx(0.4)
    if method == "dpse":  # tau = 0.25 of what the counts leave
        stage1 = sum(float(v) for k, v in led.charges.items() if k.startswith("stage1/"))
        assert stage1 == pytest.approx(0.25 * (3.6 if relation == "add_remove" else 4.0))
    spend = bt.spend(cfg, (40, 20), bt.Hyperparams(rho=4.0))
    assert spend.relation == relation and spend.rho == 4.0 and spend.unit == "example"
    assert spend.epsilon == pytest.approx(4.0 + 2 * math.sqrt(4.0 * math.log(1e5)))
    assert ("noisy counts" in spend.notes) == (relation == "add_remove")
    # what fit reports spending is the same total, split the same way
    data = make_dataset(np.random.default_rng(0).normal(size=(60, 1)), np.zeros(60, np.float32),
                        np.repeat([0, 1], [40, 20]), num_classes=0)
    res = bt.fit(jax.random.key(1), data, bt.Hyperparams(rho=4.0, tau_fraction=0.25, count_fraction=0.1), cfg)
    assert res.spend == spend
    diag = res.diagnostics
    total = float(diag["rho_counts"] + diag["rho_stage1"] + diag["rho_stage2"])
    assert total == pytest.approx(4.0, rel=1e-5)
    assert float(diag["rho_counts"]) == pytest.approx(float(led.charges.get("counts", 0.0)), rel=1e-6)


def test_swap_spelling_is_retired():
    assert bt.Config().relation == "replace_one_within_group"  # the default
    with pytest.raises(ValueError, match="'swap' was retired.*'replace_one_within_group'"):
        bt.Config(relation="swap")  # refused at construction (privacy.relations.as_relation)
    assert bt.Config(relation=ADD_REMOVE).relation == "add_remove"  # the enum, stored by its name
    with pytest.raises(ValueError, match="relation"):
        bt.group_noise_stds(jnp.ones(2), 1.0, 10, 1.0, relation="swap")
    with pytest.raises(TypeError):
        bt.Config(neighbour="add_remove")  # renamed to relation
    data = make_dataset(np.zeros((10, 1)), np.zeros(10, np.float32), np.repeat([0, 1], 5), num_classes=0)
    with pytest.raises(ValueError, match="count_fraction"):
        bt.fit(jax.random.key(0), data, bt.Hyperparams(count_fraction=1.0), bt.Config(relation="add_remove"))


@pytest.mark.parametrize("relation", ["replace_one_within_group", "add_remove"])
def test_stage_entry_points_are_what_fit_runs(relation):
    """The audited entry points compute exactly what fit computes with the same key: stage 1's
    allocation (fit's Diagnostics.se) and, with T = 1, the stage-2 release (theta_1 = -lr M 1_K)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(80, 1))
    s = np.repeat([0, 1], [60, 20])
    y = (np.where(s == 0, -2.0, 2.0) * x[:, 0] + rng.normal(size=80)).astype(np.float32)
    data = make_dataset(x, y, s, num_classes=0)
    hp = bt.Hyperparams(rho=5.0, learning_rate=1.0)
    cfg = bt.Config(relation=relation)
    key = jax.random.key(3)
    se, _, _ = bt.stage1_standard_errors(key, data, hp, cfg)
    diag = bt.fit(key, data, hp, cfg).diagnostics
    np.testing.assert_allclose(se, diag["se"], rtol=1e-6)
    one = bt.Config(relation=relation, method="equal", steps=1, box=float("inf"))
    theta = bt.fit(key, data, hp, one).params
    m1, _ = bt.noisy_group_release(key, data, jnp.zeros(1), jnp.ones(2) / math.sqrt(2), hp, one)
    # theta_1 = -(M_0 + M_1) cancels two O(1) group terms to O(0.01): the float32 tolerance is set on
    # the terms' size (jit may fuse the sum differently from the eager call), not on theta's.
    scale = float(jnp.sum(jnp.abs(m1)))
    np.testing.assert_allclose(theta, -jnp.sum(m1, axis=1), rtol=0, atol=16 * np.finfo(np.float32).eps * scale)


# ---------------------------------------------------------------- audits (default path)


def _audit(family, bug, key, **kw):
    fn, info = G.BUILDERS[family](bug=bug, **kw)
    n = G.SUITE_TRIALS["quick"][family]
    row = audit_mechanism(fn, jax.random.key(key), mechanism=family,
                          claimed_epsilon=info["claimed_epsilon"], delta=info["delta"],
                          num_trials=n, planted_bug=bug, chunk_size=min(n, 4000))
    return row, info


@pytest.mark.parametrize("family,bug", [(f, b) for f, bugs in G.FAMILY_BUGS.items()
                                        for b in (None,) + bugs])
def test_audit_default_passes_and_planted_bugs_are_caught(family, bug):
    """Quick-size audits: the default configuration's lower bound stays at or below the claim,
    every planted bug's lies above it (passed means both)."""
    row, info = _audit(family, bug, 30)
    assert row["passed"], row
    want = {"private_denominator": "add_remove", "cross_group": "replace_one"}.get(bug, "replace_one_within_group")
    assert info["relation"] == want
    if bug in ("noise", "private_denominator", "stage1_paper_clip"):
        assert row["epsilon_lower_bound"] > row["claimed_epsilon"] + 1.0, row


@pytest.mark.parametrize("family,kw", [("budget_tailoring", {"relation": "add_remove"}),
                                       ("budget_tailoring_stage1", {"relation": "add_remove"}),
                                       ("budget_tailoring_stage1", {"stage1_clip": "paper"})])
def test_audit_corrected_options_pass(family, kw):
    """The corrected non-default options on the same games: add/remove with noisy counts charged,
    and the literal stage-1 clip with its noise for max(Delta, Delta^2) at Delta = 0.25."""
    row, info = _audit(family, None, 31, **kw)
    assert row["passed"], row
    assert info["relation"] == kw.get("relation", "replace_one_within_group")


def test_audit_builders_validate():
    with pytest.raises(ValueError, match="bug"):
        G.budget_tailoring_mechanism(bug="clipping")
    with pytest.raises(ValueError, match="relation"):
        G.budget_tailoring_stage1_mechanism(bug="noise", relation="add_remove")
    with pytest.raises(ValueError, match="clip < 1"):
        G.budget_tailoring_stage1_mechanism(bug="stage1_paper_clip", clip=2.0)
    assert set(G.BUILDERS) == set(G.FAMILY_BUGS) == set(G.SUITE_TRIALS["quick"])
