"""Tests of dpfair_jax.algorithms.mean_estimation (paper 003: clipped means, COINPRESS, stratified).

Noise variances are compared with their closed forms; tolerances come from the standard error of
a sample variance (Laplace: relative SE sqrt(5/N); Gaussian: sqrt(2/N)); keys are fixed.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.privacy import accounting as acc

N_MC = 2500
KEYS = jax.random.split(jax.random.key(20240101), N_MC)


def _rel_var_check(samples, theory, kurtosis_factor):
    """Sample variance within 4 standard errors of ``theory`` (SE = theory * sqrt(f / N))."""
    samples = np.asarray(samples, np.float64)
    var = float(np.mean((samples - samples.mean()) ** 2))
    se = theory * math.sqrt(kurtosis_factor / samples.size)
    assert abs(var - theory) < 4 * se, (var, theory, se)


def _sizes_data(sizes, spread=0.1, seed=0):
    rng = np.random.default_rng(seed)
    s = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    x = (rng.normal(size=s.size) * spread).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(s)


def test_reference_constants():
    g = me.gaussian_tailbound(1, 0.01)
    assert g == pytest.approx(3.808185, abs=1e-6)
    assert float(me.coinpress_clip_radius(3.0, g)) == pytest.approx(6.4422, abs=1e-4)
    np.testing.assert_allclose(me.coinpress_rhos(0.5), [0.125, 0.375])
    with pytest.raises(ValueError, match="split"):
        me.coinpress_rhos(0.5, (0.5, 0.6))


@pytest.mark.parametrize("relation,factor", [("replace_one_within_group", 2.0), ("add_remove", 1.0)])
def test_laplace_mean_noise_variance(relation, factor):
    n, R, gamma, eps = 2000, 3.0, 0.05, 0.7
    x, _ = _sizes_data([n])
    est = jax.jit(jax.vmap(lambda k: me.laplace_mean(k, x, R=R, gamma=gamma, epsilon=eps,
                                                     relation=relation)))(KEYS)
    b = factor * (R + math.sqrt(math.log(n / gamma))) / (n * eps)
    _rel_var_check(np.asarray(est) - float(jnp.mean(x)), 2 * b * b, 5.0)


def test_stratified_laplace_variance_closed_form():
    """Notes A2: Var = 8 sum_i (R + s_i)^2 / (n eps)^2 (the group size cancels); ratio <= k."""
    sizes = [7000, 2000, 800, 150, 50]
    n, R, gamma, eps = sum(sizes), 3.0, 0.05, 1.0
    x, s = _sizes_data(sizes)
    est = jax.jit(jax.vmap(lambda k: me.stratified_laplace_mean(
        k, x, s, 5, R=R, gamma=gamma, epsilon=eps).estimate[0]))(KEYS)
    hw = R + np.sqrt(np.log(np.asarray(sizes) / gamma))
    theory = 8.0 * np.sum(hw ** 2) / (n * eps) ** 2
    assert theory == pytest.approx(1.4691e-5, rel=1e-3)  # the notes' value
    # a sum of 5 Laplaces: excess kurtosis 3 sum b^4 / (sum b^2)^2, var-of-var factor 2 + kurt
    b2 = hw ** 2
    _rel_var_check(np.asarray(est) - float(jnp.mean(x)), theory, 2 + 3 * np.sum(b2 ** 2) / np.sum(b2) ** 2)
    glob = 8 * (R + math.sqrt(math.log(n / gamma))) ** 2 / (n * eps) ** 2
    assert theory / glob == pytest.approx(4.355, abs=5e-3)
    assert theory / glob <= 5


@pytest.mark.parametrize("relation,factor", [("replace_one_within_group", 2.0), ("add_remove", 1.0)])
def test_stratified_gaussian_variance_is_k_times_global(relation, factor):
    sizes = [500, 300, 150, 50]
    n, C, rho = sum(sizes), 2.0, 0.3
    x, s = _sizes_data(sizes)

    def both(k):
        k1, k2 = jax.random.split(k)
        st = me.stratified_gaussian_mean(k1, x, s, 4, center=0.0, clip=C, rho=rho, relation=relation)
        gl = me.gaussian_mean(k2, x, center=0.0, clip=C, rho=rho, relation=relation)
        return st.estimate[0], gl

    st, gl = jax.jit(jax.vmap(both))(KEYS)
    glob = (factor * C / n) ** 2 / (2 * rho)
    _rel_var_check(np.asarray(st) - float(jnp.mean(x)), 4 * glob, 2.0)
    _rel_var_check(np.asarray(gl) - float(jnp.mean(x)), glob, 2.0)


def test_coinpress_final_step_variance_and_radius():
    """Without active clipping, COINPRESS's output is mean + N(0, (2 C_2 / n)^2 / (2 rho_2)) with a
    deterministic C_2 = clip_radius(gamma sqrt(1/n + sigma_1^2))."""
    n, rhos = 1000, np.array([0.125, 0.375])
    x, _ = _sizes_data([n], spread=0.05)
    g = me.gaussian_tailbound(1)
    c1 = float(me.coinpress_clip_radius(3.0, g))
    sigma1 = 2 * c1 / n / math.sqrt(2 * rhos[0])
    r1 = math.sqrt(1 / n + sigma1 ** 2) * g
    c2 = float(me.coinpress_clip_radius(r1, g))
    sigma2 = 2 * c2 / n / math.sqrt(2 * rhos[1])
    out = jax.jit(jax.vmap(lambda k: me.stratified_coinpress(
        k, x, jnp.zeros(n, jnp.int32), 1, rhos=rhos)))(KEYS)
    r2 = math.sqrt(1 / n + sigma2 ** 2) * g
    np.testing.assert_allclose(np.asarray(out.radius)[:, 0], r2, rtol=1e-5)
    _rel_var_check(np.asarray(out.estimate)[:, 0] - float(jnp.mean(x)), sigma2 ** 2, 2.0)


@pytest.mark.slow
def test_coinpress_accuracy_unit_gaussian_and_multivariate():
    key = jax.random.key(3)
    x = jax.random.normal(key, (10000,))
    errs = jax.vmap(lambda k: me.coinpress_mean(k, x) - jnp.mean(x))(KEYS[:200])
    # error against the empirical mean is the last step's noise: E|N(0, s2^2)| = s2 sqrt(2/pi)
    # with s2 = 2 C_2 / n / sqrt(2 rho_2), C_2 ~ 3.82 (clipping barely active)
    s2 = 2 * 3.82 / 10000 / math.sqrt(0.75)
    assert float(jnp.mean(jnp.abs(errs))) == pytest.approx(s2 * math.sqrt(2 / math.pi), rel=0.15)
    x3 = jax.random.normal(key, (5000, 3)) + jnp.array([1.0, -0.5, 0.2])
    m = me.coinpress_mean(KEYS[0], x3)
    assert m.shape == (3,)
    np.testing.assert_allclose(np.asarray(m), [1.0, -0.5, 0.2], atol=0.08)
    cum = me.coinpress_mean(KEYS[0], x, clip_mode="cumulative")
    assert abs(float(cum - jnp.mean(x))) < 0.05


def test_empty_and_singleton_groups_no_nan():
    x = jnp.arange(6.0)
    s = jnp.array([0, 0, 0, 0, 2, 3], jnp.int32)  # group 1 empty, groups 2 and 3 have one member
    for out in (
        me.stratified_coinpress(KEYS[0], x, s, 5, center=1.0),
        me.stratified_laplace_mean(KEYS[0], x, s, 5, R=3.0, gamma=0.1, epsilon=1.0),
        me.stratified_gaussian_mean(KEYS[0], x, s, 5, center=0.0, clip=1.0, rho=0.5),
        me.stratified_coinpress(KEYS[0], x, s, 5, count_rho=1.0, relation="add_remove"),
    ):
        for leaf in out:
            assert np.all(np.isfinite(np.asarray(leaf, np.float64)))
        present = np.asarray(out.present)
        assert not present[1] and not present[4]
        assert float(jnp.sum(out.weights)) == pytest.approx(1.0, abs=1e-6)
        assert np.all(np.asarray(out.weights)[~present] == 0)
    out = me.stratified_coinpress(KEYS[0], x, s, 5, center=1.0)
    assert float(out.group_means[1, 0]) == 1.0  # empty group keeps the prior centre


def test_weights_public_and_recombination():
    x, s = _sizes_data([300, 200, 100])
    w = jnp.array([0.2, 0.3, 0.5])
    out = me.stratified_coinpress(KEYS[1], x, s, 3, weights=w)
    np.testing.assert_allclose(float(out.estimate[0]), float(w @ out.group_means[:, 0]), rtol=1e-5)
    out_exact = me.stratified_coinpress(KEYS[1], x, s, 3)
    np.testing.assert_allclose(np.asarray(out_exact.weights), [0.5, 1 / 3, 1 / 6], rtol=1e-6)
    pw = me.public_weights(jnp.array([0, 0, 2, 2], jnp.int32), 3)
    np.testing.assert_allclose(np.asarray(pw), [0.5, 0.0, 0.5])


def test_noisy_counts_variance():
    s = jnp.asarray(np.repeat(np.arange(3), [50, 30, 20]).astype(np.int32))
    c = jax.vmap(lambda k: me.noisy_counts(k, s, 3, 0.5))(KEYS)
    _rel_var_check(np.asarray(c)[:, 1] - 30, 1.0 / (2 * 0.5), 2.0)
    c2 = jax.vmap(lambda k: me.noisy_counts(k, s, 3, 0.5, relation="replace_one"))(KEYS)
    _rel_var_check(np.asarray(c2)[:, 0] - 50, 2.0 / (2 * 0.5), 2.0)


def test_ledger_parallel_composition():
    hp = me.MeanHparams(rho=0.5)
    for k in (1, 3, 12):
        sp = me.spend(me.MeanConfig(method="coinpress", num_groups=k, delta=1e-6), (1,) * k, hp)
        assert sp.rho == pytest.approx(0.5)  # not k * 0.5: the groups are disjoint
        assert sp.epsilon == pytest.approx(acc.zcdp_to_dp(0.5, 1e-6))
    noisy = me.MeanConfig(method="coinpress", num_groups=12, counts="noisy", delta=1e-6)  # count_rho 0.05
    assert me.spend(noisy, (1,) * 12, hp).rho == pytest.approx(0.55)


def test_jitted_vmap_over_traced_budgets_and_groups():
    x, s = _sizes_data([400, 100, 0, 50], spread=1.0)
    rho_grid = jnp.array([[0.05, 0.15], [0.125, 0.375], [1.0, 3.0]])

    def one(k, rh, w):
        return me.stratified_coinpress(k, x, s, 4, rhos=rh, weights=w).estimate[0]

    w = jnp.array([0.5, 0.3, 0.1, 0.1])
    got = jax.jit(jax.vmap(one, in_axes=(None, 0, None)))(KEYS[2], rho_grid, w)
    want = [float(one(KEYS[2], r, w)) for r in rho_grid]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


def test_reference_code_semantics_is_nonprivate_group_mean():
    rng = np.random.default_rng(1)
    s = jnp.asarray(np.repeat(np.arange(3), [200, 100, 50]).astype(np.int32))
    x = jnp.asarray(rng.normal(size=350).astype(np.float32) * 0.5)
    ref = me.reference_code_stratified_mean(KEYS[0], x, s, 3)
    # no clipping is active for this data: the stored "StratCOINPRESS" equals the exact mean
    assert float(ref) == pytest.approx(float(jnp.mean(x)), abs=1e-5)


def test_validation_errors():
    x = jnp.zeros(10)
    s = jnp.zeros(10, jnp.int32)
    with pytest.raises(ValueError, match="epsilon"):
        me.laplace_mean(KEYS[0], x, R=1.0, gamma=0.1, epsilon=0.0)
    with pytest.raises(ValueError, match="gamma"):
        me.laplace_mean(KEYS[0], x, R=1.0, gamma=1.5, epsilon=1.0)
    with pytest.raises(ValueError, match="group ids"):
        me.stratified_coinpress(KEYS[0], x, s + 3, 2)
    with pytest.raises(ValueError, match="weights"):
        me.stratified_coinpress(KEYS[0], x, s, 2, weights=jnp.ones(3))
    with pytest.raises(ValueError, match="rhos"):
        me.coinpress_mean(KEYS[0], x, rhos=(0.1, -0.2))
    with pytest.raises(ValueError, match="relation"):
        me.coinpress_mean(KEYS[0], x, relation="swap")
    with pytest.raises(ValueError, match="non-finite"):
        me.coinpress_mean(KEYS[0], x.at[0].set(jnp.nan))
    with pytest.raises(ValueError, match="clip_mode"):
        me.coinpress_mean(KEYS[0], x, clip_mode="inplace")


def test_multivariate_laplace_and_gaussian_noise():
    """d-D: the Laplace scale uses the L1 sensitivity d * 2(R+s)/n per coordinate; the Gaussian
    the L2 sensitivity 2C/n (one std for every coordinate)."""
    n, d, R, gamma, eps, C, rho = 1000, 3, 2.0, 0.1, 1.0, 1.5, 0.4
    rng = np.random.default_rng(5)
    x = jnp.asarray((rng.normal(size=(n, d)) * 0.05).astype(np.float32))

    def both(k):
        k1, k2 = jax.random.split(k)
        return (me.laplace_mean(k1, x, R=R, gamma=gamma, epsilon=eps),
                me.gaussian_mean(k2, x, center=jnp.zeros(d), clip=C, rho=rho))

    lap, gau = jax.jit(jax.vmap(both))(KEYS[:1500])
    assert lap.shape == (1500, d) and gau.shape == (1500, d)
    b = d * 2 * (R + math.sqrt(math.log(n / gamma))) / (n * eps)
    _rel_var_check(np.asarray(lap)[:, 1] - float(jnp.mean(x[:, 1])), 2 * b * b, 5.0)
    _rel_var_check(np.asarray(gau)[:, 2] - float(jnp.mean(x[:, 2])), (2 * C / n) ** 2 / (2 * rho), 2.0)
