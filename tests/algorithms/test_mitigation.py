"""(gamma1, gamma2) mitigation (paper 001, reconstruction): zero gammas = DP-SGD bit for bit, the
penalty gradient, private statistics, accounting."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models
from dpfair_jax.algorithms import FitResult, dpsgd, mitigation
from dpfair_jax.data import synthetic
from dpfair_jax.privacy import accounting
from _sgd_keywords import dpsgd_fit_kw, mitigation_fit_kw, mitigation_spend_kw


@pytest.fixture(scope="module")
def setup():
    data = synthetic.two_group_classification(jax.random.key(0), 200, ratio=0.4, d=3, norms=[0.5, 2.0],
                                              margins=[1.0, 0.3]).data
    model = models.mlp(hidden=(4,), out=1, activation="tanh", input_dim=3)
    params = model.init(jax.random.key(1))
    return data, model, params


KW = dict(clip_norm=0.1, noise_multiplier=5.0, learning_rate=0.05, batch_size=16, steps=12)


@pytest.mark.slow
def test_zero_gammas_equal_dpsgd_bit_for_bit(setup):
    data, model, params = setup
    key = jax.random.key(42)
    p_ref, _ = dpsgd_fit_kw(key, model, params, data, per_example="vmap", **KW)
    p_mit, diag = mitigation_fit_kw(key, model, params, data, gamma1=0.0, gamma2=0.0,
                                   stats_noise_multiplier=5.0, **KW)
    for a, b in zip(jax.tree_util.tree_leaves(p_ref), jax.tree_util.tree_leaves(p_mit)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert diag["private_group_fraction"].shape == (12, 2)


def test_nonzero_gammas_change_the_update_and_vmap_grid(setup):
    data, model, params = setup
    key = jax.random.key(3)

    def run(g1, g2):
        return mitigation_fit_kw(key, model, params, data, gamma1=g1, gamma2=g2, stats_noise_multiplier=1.0,
                                diagnostics=False, **KW)[0]

    grid = jnp.array([[0.0, 0.0], [1.0, 1.0]])
    out = jax.jit(jax.vmap(lambda g: run(g[0], g[1])))(grid)
    for a in jax.tree_util.tree_leaves(out):
        assert np.all(np.isfinite(np.asarray(a)))
    diff = sum(float(jnp.sum(jnp.abs(a[1] - a[0]))) for a in jax.tree_util.tree_leaves(out))
    assert diff > 0


def test_penalty_coefficients_are_the_gradient_of_the_abs_penalty():
    # stat_a = mean over group a of v_i; the penalty sum_a |stat_a - stat|; its derivative in v_i
    rng = np.random.default_rng(0)
    s = np.r_[np.zeros(7, int), np.ones(5, int), np.full(4, 2)]
    vals = rng.random(16)

    def penalty(vv):
        st = jnp.stack([jnp.mean(vv[s == a]) for a in range(3)])
        return jnp.sum(jnp.abs(st - jnp.mean(vv)))

    auto = np.asarray(jax.grad(penalty)(jnp.asarray(vals)))
    frac = np.bincount(s) / s.size
    stat = np.array([vals[s == a].mean() for a in range(3)])
    c = np.asarray(mitigation.penalty_coefficients(jnp.asarray(stat), jnp.asarray(frac)))
    np.testing.assert_allclose(auto * s.size, c[s], rtol=1e-5)


@pytest.fixture(scope="module")
def full_step(setup):
    """One step at q = 1 (every row in the batch) for each of 300 keys, hyperparameters traced
    (one compiled program for every test): ``(keys, run(g1, g2, clip, z, zs, lr) -> (params,
    noisy stat sums [300, K, 3]))``."""
    data, model, params = setup
    keys = jax.random.split(jax.random.key(5), 300)

    @jax.jit
    def run(g1, g2, clip, z, zs, lr):
        def one(k):
            p, diag = mitigation_fit_kw(k, model, params, data, gamma1=g1, gamma2=g2, clip_norm=clip,
                                       noise_multiplier=z, stats_noise_multiplier=zs, learning_rate=lr,
                                       batch_size=data.n, steps=1)
            return p, diag["private_group_sums"][0]
        return jax.vmap(one)(keys)

    return keys, run


def _per_example_grads(model, params, data) -> np.ndarray:
    """Hand-written per-example gradients of the logistic loss, flattened: [n, P] (float64)."""
    def loss(p, xi, yi):
        z = model.apply(p, xi).reshape(())
        return jnp.logaddexp(0.0, z) - yi * z

    grads = jax.vmap(lambda xi, yi: jax.grad(loss)(params, xi, yi))(data.x, data.y.astype(jnp.float32))
    return np.concatenate([np.asarray(g, np.float64).reshape(data.n, -1)
                           for g in jax.tree_util.tree_leaves(grads)], axis=1)


def test_private_statistics_noise_scale(setup, full_step):
    """The released group sums carry N(0, (z_s sqrt 3)^2) noise: measured against the exact sums
    (NumPy: counts, clipped norms / C, uncertainty / (1 - 1/K)) at z_s = 2, over 300 keys."""
    data, model, params = setup
    zs, clip = 2.0, 1e-3  # every gradient norm exceeds C: the clipped-norm column is the count
    _, sums = full_step[1](1.0, 1.0, clip, 1.0, zs, 0.05)
    s = np.asarray(data.s)
    p = 1.0 / (1.0 + np.exp(-np.asarray(model.apply(params, data.x), np.float64).reshape(-1)))
    unc = 2.0 * p * (1.0 - p) / 0.5  # u(x) / (1 - 1/K), K = 2 classes
    assert np.linalg.norm(_per_example_grads(model, params, data), axis=1).min() > clip
    exact = np.stack([np.bincount(s, minlength=2), np.bincount(s, minlength=2),
                      np.bincount(s, weights=unc, minlength=2)], axis=1)
    noise = np.asarray(sums, np.float64) - exact[None]
    sigma = zs * math.sqrt(3.0)  # hand-written: multiplier x sqrt(3) (each row's vector in [0, 1]^3)
    m = noise.size
    sd = noise.std(ddof=1)
    assert abs(sd / sigma - 1.0) < 4.0 / math.sqrt(2.0 * m), (sd, sigma)
    assert abs(noise.mean()) < 4.0 * sigma / math.sqrt(m)
    assert noise.std(axis=0).min() > 0.8 * sigma  # every one of the K x 3 entries is noised


def test_update_noise_scale(setup, full_step):
    """The update's noise is N(0, (z C)^2) on the clipped sum: recovered from one SGD step at
    learning rate 1 and q = 1 against a hand-written per-example clipping (gammas 0)."""
    data, model, params = setup
    z, clip, n = 5.0, 0.1, data.n
    keys = full_step[0]
    out, _ = full_step[1](0.0, 0.0, clip, z, 1.0, 1.0)
    flat = _per_example_grads(model, params, data)
    norms = np.linalg.norm(flat, axis=1)
    clipped_sum = (flat * np.minimum(1.0, clip / norms)[:, None]).sum(0)
    p0 = np.concatenate([np.asarray(a, np.float64).ravel() for a in jax.tree_util.tree_leaves(params)])
    p1 = np.concatenate([np.asarray(a, np.float64).reshape(len(keys), -1) for a in jax.tree_util.tree_leaves(out)], 1)
    noise = n * (p0[None] - p1) - clipped_sum[None]
    sigma = z * clip
    m = noise.size
    assert abs(noise.std(ddof=1) / sigma - 1.0) < 4.0 / math.sqrt(2.0 * m)
    assert abs(noise.mean()) < 4.0 * sigma / math.sqrt(m)


def test_noiseless_update_is_within_its_sensitivity_under_large_penalties(setup):
    """Noise off, q = 1, one SGD step at learning rate 1: the update is the clipped sum over the
    batch divided by the batch size, so ``n ||p0 - p1||`` is at most ``n`` times one example's
    bound ``C + C_p`` (``penalty_clip_norm``; the joint clip ``C`` is pinned by
    test_update_noise_scale), whatever the gammas (here large, so an unclipped penalty part would
    exceed it by orders of magnitude)."""
    data, model, params = setup
    c, pclip = 1e-3, 2e-3
    p1, _ = mitigation_fit_kw(jax.random.key(2), model, params, data, gamma1=200.0, gamma2=200.0, clip_norm=c,
                             noise_multiplier=0.0, stats_noise_multiplier=0.0, learning_rate=1.0,
                             batch_size=data.n, steps=1, penalty_clip_norm=pclip)
    p0 = np.concatenate([np.asarray(a, np.float64).ravel() for a in jax.tree_util.tree_leaves(params)])
    p1 = np.concatenate([np.asarray(a, np.float64).ravel() for a in jax.tree_util.tree_leaves(p1)])
    bound = c + pclip
    assert data.n * np.linalg.norm(p0 - p1) <= data.n * bound * (1 + 1e-4)
    assert data.n * np.linalg.norm(p0 - p1) > 0.1 * bound  # the step did move


def test_statistics_and_update_noise_use_distinct_keys(setup, full_step):
    """The statistics' noise must come from a key the update's noise does not use:
    fold_in(k_noise, i) is split(k_noise, L)[i], the noise key of parameter leaf i, so the former
    derivation tied the statistics' noise to the update's. Pinned by reproducing the released
    noise from fold_in(k_step, 2) by hand."""
    data, model, params = setup
    key = full_step[0][0]
    k_step = jax.random.split(key, 2)[0]
    _, k_noise = jax.random.split(k_step)
    leaves = jax.tree_util.tree_leaves(params)
    used = {tuple(np.asarray(jax.random.key_data(k))) for k in jax.random.split(k_noise, len(leaves))}
    used.add(tuple(np.asarray(jax.random.key_data(k_noise))))
    assert tuple(np.asarray(jax.random.key_data(jax.random.fold_in(k_noise, 1)))) in used  # the old key
    assert tuple(np.asarray(jax.random.key_data(jax.random.fold_in(k_step, 2)))) not in used
    # and train draws the statistics from fold_in(k_step, 2): reproduce the released noise
    noisy = np.asarray(full_step[1](0.0, 0.0, 1e-3, 1.0, 2.0, 0.05)[1][0])
    exact = np.asarray(full_step[1](0.0, 0.0, 1e-3, 1.0, 0.0, 0.05)[1][0])
    kk = jax.random.split(jax.random.fold_in(k_step, 2), 1)[0]
    ref = 2.0 * math.sqrt(3.0) * np.asarray(jax.random.normal(kk, (2, 3), jnp.float32))
    np.testing.assert_allclose(noisy - exact, ref, rtol=1e-4, atol=1e-4)


def _mechanism_delta(sp, n, b, steps, delta):
    """``delta`` less the padding's truncation charge at the spend's epsilon (taken out of delta)."""
    from dpfair_jax.privacy import sampling

    return delta - sampling.truncation_delta(n, b / n, mitigation.padded_batch_size(n, b, steps), steps, sp.epsilon)


def test_privacy_composes_both_gaussians():
    z, zs, n, b, steps, delta = 5.0, 5.0, 1000, 32, 100, 1e-5
    sp = mitigation_spend_kw(z, zs, n=n, batch_size=b, steps=steps, delta=delta)
    eff = accounting.effective_noise_multiplier([z, zs])
    ref = accounting.dpsgd_epsilon(eff, b / n, steps, _mechanism_delta(sp, n, b, steps, delta))
    assert sp.epsilon == pytest.approx(ref, rel=1e-6) and sp.delta == delta
    plain = mitigation_spend_kw(z, zs, n=n, batch_size=b, steps=steps, delta=delta, gamma1=0.0, gamma2=0.0)
    ref_plain = accounting.dpsgd_epsilon(z, b / n, steps, _mechanism_delta(plain, n, b, steps, delta))
    assert plain.epsilon == pytest.approx(ref_plain, rel=1e-6)
    assert plain.epsilon < sp.epsilon
    # a penalized run (or one whose gammas are not stated) is charged for the statistics
    for kw in ({}, {"gamma1": 1.0, "gamma2": 0.0}, {"gamma1": 0.0}):
        assert mitigation_spend_kw(z, zs, n=n, batch_size=b, steps=steps, delta=delta, **kw).epsilon == sp.epsilon


@pytest.mark.parametrize("stats_every", [0, 5])
def test_privacy_is_the_event_written_from_the_run(stats_every):
    """The spend against dp-accounting on events written here from the run's description (not
    through the kit's accounting): every one of ``steps`` steps is a Poisson(q = b / n) sample
    releasing the clipped-sum Gaussian and, per step, the statistics Gaussian (``stats_every=0``);
    with ``stats_every=k`` the statistics are released on the full data at steps 0, k, 2k, ...
    (``ceil(steps / k)`` unsampled Gaussians); the truncation charge covers all ``steps`` steps."""
    import dp_accounting
    from scipy import stats

    z, zs, n, b, steps, delta, width = 1.3, 2.1, 400, 20, 12, 1e-5, 40
    sp = mitigation_spend_kw(z, zs, n=n, batch_size=b, steps=steps, delta=delta, stats_every=stats_every,
                            max_batch_size=width)
    g = dp_accounting.GaussianDpEvent
    if stats_every:
        step = dp_accounting.PoissonSampledDpEvent(b / n, g(z))
        releases = sum(1 for t in range(steps) if t % stats_every == 0)
        hand = dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(step, steps),
                                              dp_accounting.SelfComposedDpEvent(g(zs), releases)])
    else:
        step = dp_accounting.PoissonSampledDpEvent(b / n, dp_accounting.ComposedDpEvent([g(z), g(zs)]))
        hand = dp_accounting.SelfComposedDpEvent(step, steps)
    rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    # (1 + e^eps) T P(Binomial(n + 1, q) > width): either neighbour's sample may overflow, each
    # step; a charge below delta is taken out of it (the mechanism accounted at delta - trunc), a
    # larger one is added to it
    trunc = (1.0 + math.exp(sp.epsilon)) * steps * stats.binom.sf(width, n + 1, b / n)
    inside = trunc < delta
    eps = rdp.compose(hand).get_epsilon(delta - trunc if inside else delta)
    assert sp.epsilon == pytest.approx(eps, rel=1e-6)
    assert sp.delta == (delta if inside else pytest.approx(delta + trunc, rel=1e-6))
    assert sp.relation == "add_remove" and sp.unit == "example"


def test_privacy_truncation_at_the_trained_padding(setup):
    """privacy and train share one padding rule: the truncation charge is that of the width the
    run used (max_batch_size), computed by hand with sampling.truncation_delta."""
    from dpfair_jax.privacy import sampling

    z, zs, n, b, steps, delta = 2.0, 2.0, 1000, 32, 50, 1e-5
    default = mitigation.padded_batch_size(n, b, steps)
    assert default == sampling.max_batch_size_for(n, b / n, steps)
    for width in (55, default):
        sp = mitigation_spend_kw(z, zs, n=n, batch_size=b, steps=steps, delta=delta, max_batch_size=width)
        extra = sampling.truncation_delta(n, b / n, width, steps, sp.epsilon)
        if extra < delta:  # taken out of delta
            eps_mech = accounting.epsilon_of_event(sp.event, delta - extra)
            assert sp.delta == delta and eps_mech <= sp.epsilon < eps_mech * (1 + 1e-6)
        else:  # the charge alone exceeds delta: added to it
            assert sp.delta == pytest.approx(delta + extra, rel=1e-9)
        assert f"max_batch_size={width}" in sp.notes
    narrow = mitigation_spend_kw(z, zs, n=n, batch_size=b, steps=steps, delta=delta, max_batch_size=55)
    assert narrow.delta > 1e3 * delta  # a 55-row pad at expected size 32 overflows now and then
    data, model, params = setup
    for fn in (lambda: mitigation_spend_kw(z, zs, n=data.n, batch_size=16, steps=3, delta=delta, max_batch_size=8),
               lambda: mitigation_fit_kw(jax.random.key(0), model, params, data, gamma1=0.0, gamma2=0.0,
                                        stats_noise_multiplier=1.0, max_batch_size=8, **KW)):
        with pytest.raises(ValueError, match="max_batch_size"):
            fn()


def test_validation(setup):
    data, model, params = setup
    with pytest.raises(ValueError, match="gamma1"):
        mitigation_fit_kw(jax.random.key(0), model, params, data, gamma1=-1.0, gamma2=0.0,
                         stats_noise_multiplier=1.0, **KW)
    with pytest.raises(ValueError, match="Dataset"):
        mitigation_fit_kw(jax.random.key(0), model, params, (data.x, data.y), gamma1=0.0, gamma2=0.0,
                         stats_noise_multiplier=1.0, **KW)


@pytest.mark.parametrize("gammas", [(1.0, 1.0), (0.0, 0.0)])
def test_spend_of_calibrate_hits_the_target(gammas):
    cfg = mitigation.MitigationConfig(model=models.logistic(), delta=1e-5, batch_size=40, steps=30)
    base = mitigation.MitigationHparams(gamma1=gammas[0], gamma2=gammas[1], noise_multiplier=1.0,
                                        stats_noise_multiplier=4.0)
    hp = mitigation.calibrate(cfg, 800, (2.0, 1e-5), hparams=base)
    assert hp.stats_noise_multiplier / hp.noise_multiplier == pytest.approx(4.0, rel=1e-12)
    assert 0.99 * 2.0 <= mitigation.spend(cfg, 800, hp).epsilon <= 2.0
    lower = dataclasses.replace(hp, noise_multiplier=0.99 * hp.noise_multiplier,
                                stats_noise_multiplier=0.99 * hp.stats_noise_multiplier)
    assert mitigation.spend(cfg, 800, lower).epsilon > 2.0
    # the uncharged statistics: the same multiplier as plain DP-SGD with Poisson sampling
    if gammas == (0.0, 0.0):
        d_hp = dpsgd.calibrate(dpsgd.DPSGDConfig(model=models.logistic(), delta=1e-5, batch_size=40, steps=30),
                               800, (2.0, 1e-5))
        assert hp.noise_multiplier == pytest.approx(d_hp.noise_multiplier, rel=1e-6)


@pytest.mark.slow
def test_fit_records_its_spend_and_equals_train(setup):
    data, model, params = setup
    cfg = mitigation.MitigationConfig(model=model, delta=1e-6, batch_size=16, steps=12)
    hp = mitigation.MitigationHparams(gamma1=0.5, gamma2=1.0, learning_rate=0.05, clip_norm=0.1,
                                      noise_multiplier=5.0, stats_noise_multiplier=2.0)
    res = mitigation.fit(jax.random.key(3), data, hp, cfg, params=params)
    assert type(res) is FitResult and res.report.steps == 12
    assert res.spend == mitigation.spend(cfg, data.n, hp)
    # stats_every and a separate penalty clip norm are config choices; the spend charges the
    # full-data releases of stats_every
    every = dataclasses.replace(cfg, stats_every=4)
    assert mitigation.fit(jax.random.key(3), data, hp, every, params=params).spend == mitigation.spend(every, data.n, hp)
    assert mitigation.spend(every, data.n, hp).epsilon != res.spend.epsilon
    p, _ = mitigation_fit_kw(jax.random.key(3), model, params, data, gamma1=0.5, gamma2=1.0,
                            stats_noise_multiplier=2.0, **KW)
    for a, b in zip(jax.tree_util.tree_leaves(res.params), jax.tree_util.tree_leaves(p)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_every_hyperparameter_is_checked_before_compute(setup, monkeypatch):
    data, model, params = setup
    calls = []
    monkeypatch.setattr(mitigation, "_program", lambda *a, **k: calls.append(1))
    base = dict(gamma1=1.0, gamma2=1.0, stats_noise_multiplier=1.0, **KW)
    bad = {"gamma1": float("inf"), "gamma2": -0.5, "clip_norm": 0.0, "noise_multiplier": -1.0,
           "stats_noise_multiplier": float("nan"), "learning_rate": 0.0, "batch_size": 0, "steps": 0,
           "max_batch_size": 3}
    for field, value in bad.items():
        with pytest.raises(ValueError, match=field):
            mitigation_fit_kw(jax.random.key(0), model, params, data, **{**base, field: value})
    with pytest.raises(ValueError, match="optimizer"):
        mitigation_fit_kw(jax.random.key(0), model, params, data, optimizer="sgd", **base)
    with pytest.raises(ValueError, match="loss"):
        mitigation_fit_kw(jax.random.key(0), model, params, data, loss="hinge", **base)
    bad_y = data._replace(y=2 * data.y - 1) if hasattr(data, "_replace") else dataclasses.replace(data, y=2 * data.y - 1)
    with pytest.raises(ValueError, match=r"y: .*\{0, 1\}"):
        mitigation_fit_kw(jax.random.key(0), model, params, bad_y, **base)
    for field, value in {"gamma1": -1.0, "learning_rate": -1.0, "steps": 0}.items():
        cfg = mitigation.MitigationConfig(model=model, batch_size=16, steps=3)
        if field == "steps":
            hp, cfg = mitigation.MitigationHparams(), dataclasses.replace(cfg, steps=value)
        else:
            hp = dataclasses.replace(mitigation.MitigationHparams(), **{field: value})
        with pytest.raises(ValueError, match=field):
            mitigation.fit(jax.random.key(0), data, hp, cfg)
    with pytest.raises(ValueError, match="config.model"):
        mitigation.MitigationConfig().validate()
    assert not calls


def test_full_data_statistics_are_computed_in_blocks_with_the_same_values(setup, monkeypatch):
    """``stats_every`` releases the full data's statistics; their per-example gradient norms are
    computed ``FULL_DATA_BLOCK`` rows at a time (so 320 vmapped Adult models fit in memory). Blocks
    of 7 rows (200 rows: the last block padded) give the run of one block of every row: the released
    statistics and the trained parameters agree to float rounding."""
    from dpfair_jax.algorithms.mitigation import program as P

    data, model, params = setup
    cfg = mitigation.MitigationConfig(model=model, delta=1e-6, batch_size=16, steps=12, stats_every=4)
    # clip norm 10: the norms are not saturated, so a misplaced norm changes the statistics
    hp = mitigation.MitigationHparams(gamma1=0.5, gamma2=1.0, learning_rate=0.05, clip_norm=10.0,
                                      noise_multiplier=5.0, stats_noise_multiplier=2.0)

    def run():
        res = mitigation.fit(jax.random.key(3), data, hp, cfg, params=params)
        return res.params, res.diagnostics

    assert data.n <= P.FULL_DATA_BLOCK
    whole = run()
    monkeypatch.setattr(P, "FULL_DATA_BLOCK", 7)
    jax.clear_caches()  # retrace with the new block size
    blocked = run()
    jax.clear_caches()
    for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(blocked)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)
