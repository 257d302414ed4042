"""Synthetic generators: moments against closed forms, with tolerances from standard errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import digamma

from dpfair_jax.data import synthetic as S

Z = 4.5  # tolerance in standard errors (two-sided p ~ 7e-6 per check)


def _key(seed: int = 0) -> jax.Array:
    return jax.random.key(seed)


# --------------------------------------------------------------------------------------------
# ols_mixture (paper 000)
# --------------------------------------------------------------------------------------------


def test_ols_mixture_recovers_slopes_intercepts_and_noise():
    sizes, slopes, sds, b = (4000, 200), np.array([-10.0, 10.0]), np.array([1.0, 2.0]), np.array([0.5, -1.0])
    data, truth = S.ols_mixture(_key(1), sizes, slopes, sds, intercepts=b)
    x, y, s = (np.asarray(a, np.float64) for a in (data.x, data.y, data.s))
    assert data.x.shape == (4200, 1) and data.num_classes == 0 and data.num_groups == 2
    np.testing.assert_array_equal(np.bincount(s.astype(int)), sizes)
    np.testing.assert_allclose(np.asarray(truth.slopes)[:, 0], slopes)
    for g in range(2):
        xg, yg = x[s == g, 0], y[s == g]
        design = np.column_stack([np.ones_like(xg), xg])
        coef, res, *_ = np.linalg.lstsq(design, yg, rcond=None)
        n = len(yg)
        sigma2_hat = res[0] / (n - 2)
        se_slope = np.sqrt(sds[g] ** 2 / np.sum((xg - xg.mean()) ** 2))
        se_int = sds[g] * np.sqrt(1 / n + xg.mean() ** 2 / np.sum((xg - xg.mean()) ** 2))
        assert abs(coef[1] - slopes[g]) < Z * se_slope
        assert abs(coef[0] - b[g]) < Z * se_int
        # Var(sigma2_hat) = 2 sigma^4 / (n - 2) for Gaussian noise.
        assert abs(sigma2_hat - sds[g] ** 2) < Z * sds[g] ** 2 * np.sqrt(2 / (n - 2))
    # X ~ N(0, 1): mean and variance.
    assert abs(x.mean()) < Z / np.sqrt(len(x))
    assert abs(x.var() - 1) < Z * np.sqrt(2 / len(x))


def test_ols_mixture_multivariate_and_uniform_x():
    slopes = np.array([[1.0, -2.0, 3.0], [0.0, 1.0, 0.5]])
    data, _ = S.ols_mixture(_key(2), (3000, 3000), slopes, 0.0, dim=3, x_dist="uniform", x_scale=2.0)
    x, y, s = np.asarray(data.x), np.asarray(data.y), np.asarray(data.s)
    np.testing.assert_allclose(y, np.sum(x * slopes[s], axis=1), rtol=1e-5, atol=1e-5)  # no noise
    n = x.size
    assert x.min() >= 0 and x.max() <= 2.0
    assert abs(x.mean() - 1.0) < Z * np.sqrt(4 / 12 / n)  # U[0, 2]: mean 1, variance 1/3


def test_ols_mixture_jit_vmap_over_keys_and_slopes():
    keys = jax.random.split(_key(3), 4)
    slope_grid = jnp.array([[-10.0, 10.0], [10.0, -10.0], [10.0, 1.0], [-10.0, -1.0]])
    fn = jax.jit(jax.vmap(lambda k, b, sd: S.ols_mixture(k, (50, 5), b, sd).data.y))
    ys = fn(keys, slope_grid, jnp.array([1.0, 0.5, 2.0, 0.0]))
    assert ys.shape == (4, 55)
    for i in range(4):
        ref = S.ols_mixture(keys[i], (50, 5), slope_grid[i], [1.0, 0.5, 2.0, 0.0][i]).data.y
        np.testing.assert_allclose(ys[i], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(group_sizes=(10, 0), slopes=[1.0, 2.0]), "group_sizes"),
        (dict(group_sizes=(), slopes=[]), "group_sizes"),
        (dict(group_sizes=(10, 5), slopes=[1.0, 2.0, 3.0]), "slopes must have shape"),
        (dict(group_sizes=(10, 5), slopes=[1.0, 2.0], noise_sd=-1.0), "noise_sd"),
        (dict(group_sizes=(10, 5), slopes=[1.0, 2.0], noise_sd=[1.0, 1.0, 1.0]), "noise_sd"),
        (dict(group_sizes=(10, 5), slopes=[1.0, np.nan]), "slopes"),
        (dict(group_sizes=(10, 5), slopes=[1.0, 2.0], x_dist="cauchy"), "x_dist"),
    ],
)
def test_ols_mixture_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.ols_mixture(_key(), **kwargs)


def test_generators_refuse_rbg_keys():
    key = jax.random.key(0, impl="rbg")
    with pytest.raises(ValueError, match="threefry"):
        S.ols_mixture(key, (5, 5), [1.0, 1.0])
    with pytest.raises(ValueError, match="threefry"):
        S.gaussian_mixture(key, 10, 2, 1.0)
    with pytest.raises(ValueError, match="threefry"):
        S.two_group_classification(key, 10)


# --------------------------------------------------------------------------------------------
# Dirichlet in log space and gaussian_mixture (paper 003)
# --------------------------------------------------------------------------------------------


# One compiled program per generator configuration (compilation dominates the test time): shapes
# are fixed here and the swept parameters are traced, as in a study.
K_DIR, M_DIR = 9, 20000
_draw_dirichlet = jax.jit(jax.vmap(lambda kk, a: S.dirichlet_log_proportions(kk, a, K_DIR), in_axes=(0, None)))

N_GM, K_GM, D_GM, T_GM = 2000, 6, 2, 128
_draw_mixture = jax.jit(jax.vmap(lambda kk, a, msd, sd: S.gaussian_mixture(kk, N_GM, K_GM, a, D_GM, mean_sd=msd, sd=sd),
                                 in_axes=(0, 0, None, None)))


@pytest.mark.parametrize("alpha", [0.05, 0.3, 2.0])
def test_dirichlet_log_proportions_moments(alpha):
    k, m = K_DIR, M_DIR
    logp = np.asarray(_draw_dirichlet(jax.random.split(_key(4), m), alpha), np.float64)
    assert np.all(np.isfinite(logp)), "log-space draw must not underflow to -inf"
    p = np.exp(logp)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)
    var_p = (k - 1) / (k**2 * (k * alpha + 1))
    assert np.all(np.abs(p.mean(axis=0) - 1 / k) < Z * np.sqrt(var_p / m))
    # E[log p_i] = psi(alpha) - psi(k alpha); SE from the sample.
    e_log = digamma(alpha) - digamma(k * alpha)
    se_log = logp.std(axis=0) / np.sqrt(m)
    assert np.all(np.abs(logp.mean(axis=0) - e_log) < Z * se_log)
    # Var(p_i) against the closed form; SE of a sample variance ~ sd((p - 1/k)^2) / sqrt(m).
    dev2 = (p - 1 / k) ** 2
    assert np.all(np.abs(dev2.mean(axis=0) - var_p) < Z * dev2.std(axis=0) / np.sqrt(m))


def test_dirichlet_theorem9_identity():
    # Paper 003, Thm 9: E[sum_i log(n g_i)] = k (psi(alpha) - psi(k alpha) + log n); (9, 0.13) -> 40.002.
    n, k, alpha, m = 196967, K_DIR, 0.13, M_DIR
    logp = np.asarray(_draw_dirichlet(jax.random.split(_key(5), m), alpha), np.float64)
    total = np.sum(np.log(n) + logp, axis=1)
    expected = k * (digamma(alpha) - digamma(k * alpha) + np.log(n))
    assert abs(expected - 40.002) < 1e-3
    assert abs(total.mean() - expected) < Z * total.std() / np.sqrt(m)


def test_gaussian_mixture_rounded_sizes_static_shape_and_nonempty():
    n, k = N_GM, K_GM
    alphas = jnp.geomspace(0.005, 5.0, T_GM)
    data, truth = _draw_mixture(jax.random.split(_key(6), T_GM), alphas, 1.0, 1.0)
    sizes, s, p = np.asarray(truth.sizes), np.asarray(data.s), np.asarray(truth.proportions)
    assert data.x.shape == (T_GM, n, D_GM) and s.shape == (T_GM, n)
    np.testing.assert_array_equal(sizes.sum(axis=1), n)
    assert sizes.min() >= 1, "safe_dir_draw + largest remainder keeps every group non-empty"
    saw_tiny = False
    for i in range(T_GM):
        np.testing.assert_array_equal(np.bincount(s[i], minlength=k), sizes[i])
        # Reference safe_dir_draw: real sizes below 1 get +1, taken from the largest group; then
        # largest-remainder rounding stays within one of those real sizes.
        real = n * p[i].astype(np.float64)
        tiny = real < 1
        saw_tiny |= bool(tiny.any())
        adjusted = real + tiny
        adjusted[np.argmax(real)] -= tiny.sum()
        assert np.all(np.abs(sizes[i] - adjusted) < 1.0 + 1e-3)
    assert saw_tiny, "the alpha grid should reach groups with n * p < 1"


def test_gaussian_mixture_feature_and_mean_moments():
    sd, mean_sd = 0.5, 3.0
    data, truth = _draw_mixture(jax.random.split(_key(7), T_GM), jnp.ones(T_GM), mean_sd, sd)
    x, s = np.asarray(data.x, np.float64), np.asarray(data.s)
    means = np.asarray(truth.means, np.float64)  # [T, k, d]
    z = (x - np.take_along_axis(means, s[:, :, None], axis=1)) / sd
    z = z.reshape(-1, D_GM)
    assert np.all(np.abs(z.mean(axis=0)) < Z / np.sqrt(len(z)))
    assert np.all(np.abs(z.var(axis=0) - 1) < Z * np.sqrt(2 / len(z)))
    flat = means.reshape(-1)  # group means ~ N(0, mean_sd^2)
    assert abs(flat.mean()) < Z * mean_sd / np.sqrt(flat.size)
    assert abs(flat.var() - mean_sd**2) < Z * mean_sd**2 * np.sqrt(2 / flat.size)
    counts = np.asarray(truth.sizes, np.float64)
    np.testing.assert_allclose(np.asarray(truth.population_mean),
                               np.einsum("tk,tkd->td", counts, means) / N_GM, rtol=1e-4, atol=1e-5)
    assert data.num_classes == 0 and np.all(np.asarray(data.y) == 0)


def test_gaussian_mixture_rounded_sizes_when_n_is_close_to_k():
    # Many tiny groups and little room to take rows from the largest: still >= 1 each, sum n.
    fn = jax.jit(jax.vmap(lambda kk: S.gaussian_mixture(kk, 8, 6, 0.05).truth.sizes))
    sizes = np.asarray(fn(jax.random.split(_key(13), 256)))
    np.testing.assert_array_equal(sizes.sum(axis=1), 8)
    assert sizes.min() >= 1


def test_gaussian_mixture_multinomial_group_frequencies():
    n, k = 50000, 5
    data, truth = S.gaussian_mixture(_key(9), n, k, 0.7, sizes="multinomial")
    counts = np.bincount(np.asarray(data.s), minlength=k)
    p = np.asarray(truth.proportions, np.float64)
    np.testing.assert_array_equal(counts, np.asarray(truth.sizes))
    assert np.all(np.abs(counts - n * p) <= Z * np.sqrt(n * p * (1 - p)) + 1)
    assert np.all(np.diff(np.asarray(data.s)) >= 0)  # rows ordered by group


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=3, k=5, alpha=1.0), "smaller than k"),
        (dict(n=10, k=2, alpha=0.0), "alpha"),
        (dict(n=10, k=2, alpha=-1.0), "alpha"),
        (dict(n=10, k=2, alpha=1.0, sizes="exact"), "sizes"),
        (dict(n=0, k=2, alpha=1.0), "n must"),
        (dict(n=10, k=2, alpha=1.0, sd=-1.0), "sd"),
    ],
)
def test_gaussian_mixture_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.gaussian_mixture(_key(), **kwargs)


def test_counts_to_group_ids():
    ids = S.counts_to_group_ids(jnp.array([2, 0, 3]), 5)
    np.testing.assert_array_equal(ids, [0, 0, 2, 2, 2])


# --------------------------------------------------------------------------------------------
# two_group_classification (paper 001)
# --------------------------------------------------------------------------------------------


N_TG, D_TG = 20000, 3
_draw_two_group = jax.jit(jax.vmap(
    lambda kk, r, nrm, mrg, eta, pos: S.two_group_classification(
        kk, N_TG, r, d=D_TG, norms=nrm, margins=mrg, label_noise=eta, positive_rate=pos)))


def _two_group(seed, ratio, norms, margins, label_noise, positive_rate):
    """Three trials of one configuration through the shared compiled program."""
    args = [jnp.broadcast_to(jnp.asarray(a, jnp.float32), (3,) + np.shape(a))
            for a in (ratio, norms, margins, label_noise, positive_rate)]
    return _draw_two_group(jax.random.split(_key(seed), 3), *args)


def test_two_group_classification_sizes_norms_margins():
    n, d, ratio = N_TG, D_TG, 0.25
    norms, margins, pos = np.array([1.0, 3.0]), np.array([0.5, 2.0]), np.array([0.5, 0.3])
    data, truth = _two_group(10, ratio, norms, margins, [0.0, 0.0], pos)
    x, y, s = (np.asarray(a, np.float64).reshape(-1, *a.shape[2:]) for a in (data.x, data.y, data.s))
    n1 = round(n * ratio / (1 + ratio))
    np.testing.assert_array_equal(np.bincount(np.asarray(data.s[0])), [n - n1, n1])
    np.testing.assert_array_equal(np.asarray(truth.sizes[0]), [n - n1, n1])
    for g in range(2):
        xg, yg = x[s == g], y[s == g]
        ng = len(yg)
        assert abs(yg.mean() - pos[g]) < Z * np.sqrt(pos[g] * (1 - pos[g]) / ng)
        resid = xg - np.outer(2 * yg - 1, np.eye(d)[0]) * margins[g]
        sq = np.sum(resid**2, axis=1)  # norms_g^2 * chi2_d / d: mean norms^2, var 2 norms^4 / d
        assert abs(sq.mean() - norms[g] ** 2) < Z * norms[g] ** 2 * np.sqrt(2 / d / ng)
        assert np.all(np.abs(resid.mean(axis=0)) < Z * norms[g] / np.sqrt(d * ng))


def test_two_group_classification_label_noise():
    # Huge margin and tiny norm: the clean label is sign(x_1), so flips are observable.
    flips = np.array([0.05, 0.3])
    data, _ = _two_group(11, 1.0, [0.01, 0.01], [10.0, 10.0], flips, [0.5, 0.5])
    x, y, s = np.asarray(data.x).reshape(-1, D_TG), np.asarray(data.y).ravel(), np.asarray(data.s).ravel()
    clean = (x[:, 0] > 0).astype(int)
    for g in range(2):
        rate = np.mean(y[s == g] != clean[s == g])
        ng = np.sum(s == g)
        assert abs(rate - flips[g]) < Z * np.sqrt(flips[g] * (1 - flips[g]) / ng)


def test_two_group_classification_traced_ratio_vmap_matches_unbatched():
    keys = jax.random.split(_key(12), 3)
    ratios = jnp.array([0.1, 1.0, 0.5])
    fn = jax.jit(jax.vmap(lambda kk, r, eta: S.two_group_classification(kk, 100, r, label_noise=eta)))
    data, truth = fn(keys, ratios, jnp.array([0.0, 0.1, 0.2]))
    np.testing.assert_array_equal(np.asarray(truth.sizes)[:, 1], [9, 50, 33])
    assert data.x.shape == (3, 100, 2) and data.y.dtype == jnp.int32
    ref = S.two_group_classification(keys[2], 100, 0.5, label_noise=0.2).data
    np.testing.assert_allclose(data.x[2], ref.x, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(data.y[2], ref.y)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=10, ratio=0.0), "ratio"),
        (dict(n=10, label_noise=1.5), "label_noise"),
        (dict(n=10, positive_rate=-0.1), "positive_rate"),
        (dict(n=10, norms=[1.0, 2.0, 3.0]), "norms"),
        (dict(n=1), "n must"),
    ],
)
def test_two_group_classification_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.two_group_classification(_key(), **kwargs)
