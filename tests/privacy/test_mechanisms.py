"""Tests for dpfair_jax.privacy.mechanisms: noise scales, symmetry, exponential mechanism."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpfair_jax.privacy import mechanisms as mech

N = 100_000


def _std_within(sample: np.ndarray, sigma: float, n_se: float = 3.0) -> None:
    sample = np.asarray(sample, np.float64).ravel()
    se = sigma / np.sqrt(2 * sample.size)
    assert abs(sample.std() - sigma) < n_se * se, (sample.std(), sigma, se)


def test_gaussian_mechanism_std_and_mean():
    sigma = 2.5
    out = mech.gaussian_mechanism(jax.random.key(0), jnp.zeros(N), sigma)
    _std_within(out, sigma)
    assert abs(float(np.mean(out))) < 3 * sigma / np.sqrt(N)


def test_gaussian_mechanism_pytree_leaves_independent_and_shifted():
    tree = {"a": jnp.full((N,), 3.0), "b": (jnp.zeros((N // 2, 2)),)}
    out = mech.gaussian_mechanism(jax.random.key(1), tree, 1.5)
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tree)
    a = np.asarray(out["a"]) - 3.0
    b = np.asarray(out["b"][0]).ravel()
    _std_within(a, 1.5)
    _std_within(b, 1.5)
    # Different leaves get different keys: correlation ~ N(0, 1/N).
    assert abs(np.corrcoef(a, b)[0, 1]) < 4 / np.sqrt(N)


def test_gaussian_mechanism_zero_std_is_identity_and_jit_matches():
    x = jnp.arange(5.0)
    np.testing.assert_array_equal(mech.gaussian_mechanism(jax.random.key(0), x, 0.0), x)
    f = jax.jit(mech.gaussian_mechanism)
    np.testing.assert_allclose(f(jax.random.key(3), x, 0.7), mech.gaussian_mechanism(jax.random.key(3), x, 0.7),
                               rtol=1e-6)


def test_laplace_mechanism_scale():
    b = 0.8
    out = np.asarray(mech.laplace_mechanism(jax.random.key(2), jnp.zeros(N), b), np.float64)
    # E|X| = b and Var|X| = b^2 for Laplace(0, b).
    assert abs(np.abs(out).mean() - b) < 3 * b / np.sqrt(N)
    # Distribution check against SciPy's Laplace.
    assert stats.kstest(out, stats.laplace(scale=b).cdf).pvalue > 1e-3


def test_symmetric_gaussian_noise():
    d, sigma = 6, 1.7
    keys = jax.random.split(jax.random.key(4), 4000)
    e = np.asarray(jax.vmap(lambda k: mech.symmetric_gaussian_noise(k, d, sigma))(keys), np.float64)
    np.testing.assert_array_equal(e, np.swapaxes(e, 1, 2))
    diag = e[:, np.arange(d), np.arange(d)].ravel()
    iu = np.triu_indices(d, 1)
    off = e[:, iu[0], iu[1]].ravel()
    _std_within(diag, sigma)
    _std_within(off, sigma)
    # Distinct upper-triangle entries are independent.
    assert abs(np.corrcoef(e[:, 0, 1], e[:, 0, 2])[0, 1]) < 4 / np.sqrt(4000)


def test_noisy_sufficient_statistics_exact_and_masked():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = rng.normal(size=40).astype(np.float32)
    mask = (rng.random(40) < 0.7).astype(np.float32)
    xtx, xty = mech.noisy_sufficient_statistics(jax.random.key(0), x, y, sigma_xx=0.0, sigma_xy=0.0, mask=mask)
    xm = x[mask > 0]
    np.testing.assert_allclose(xtx, xm.T @ xm, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(xty, xm.T @ y[mask > 0], rtol=1e-5, atol=1e-5)
    xtx_n, xty_n = mech.noisy_sufficient_statistics(jax.random.key(1), x, y, sigma_xx=2.0, sigma_xy=2.0)
    np.testing.assert_allclose(xtx_n, np.asarray(xtx_n).T)
    assert not np.allclose(xtx_n, x.T @ x, atol=1e-2)
    # Multi-target y.
    _, xty2 = mech.noisy_sufficient_statistics(jax.random.key(0), x, np.stack([y, 2 * y], 1),
                                               sigma_xx=0.0, sigma_xy=0.0)
    np.testing.assert_allclose(xty2[:, 1], 2 * (x.T @ y), rtol=1e-4, atol=1e-4)


def test_exponential_mechanism_probs_closed_form():
    scores = np.array([0.0, 1.0, 2.5, -1.0])
    eps, sens = 1.3, 0.7
    p = np.asarray(mech.exponential_mechanism_probs(scores, epsilon=eps, sensitivity=sens), np.float64)
    ref = np.exp(-eps * scores / (2 * sens))
    np.testing.assert_allclose(p, ref / ref.sum(), rtol=1e-5)
    pmax = np.asarray(mech.exponential_mechanism_probs(scores, epsilon=eps, sensitivity=sens, minimize=False))
    ref = np.exp(eps * scores / (2 * sens))
    np.testing.assert_allclose(pmax, ref / ref.sum(), rtol=1e-5)
    # Huge scores stay finite (stable softmax).
    big = mech.exponential_mechanism_probs(jnp.array([1e6, 1e6 + 1]), epsilon=1.0, sensitivity=1.0)
    assert np.all(np.isfinite(big))


def test_exponential_mechanism_frequencies_chi_square():
    scores = jnp.array([0.0, 0.5, 1.0, 2.0, 4.0])
    eps, sens = 2.0, 1.0
    probs = np.asarray(mech.exponential_mechanism_probs(scores, epsilon=eps, sensitivity=sens), np.float64)
    draws = 50_000
    keys = jax.random.split(jax.random.key(7), draws)
    idx = jax.jit(jax.vmap(lambda k: mech.exponential_mechanism(k, scores, epsilon=eps, sensitivity=sens)))(keys)
    counts = np.bincount(np.asarray(idx), minlength=scores.shape[0])
    i0, p0 = mech.exponential_mechanism(keys[0], scores, epsilon=eps, sensitivity=sens, return_probs=True)
    assert int(i0) == int(idx[0])
    np.testing.assert_allclose(p0, probs, rtol=1e-6)
    probs = probs / probs.sum()
    assert stats.chisquare(counts, probs * draws).pvalue > 1e-3


def test_exponential_mechanism_batched_and_traced_epsilon():
    scores = jnp.array([[0.0, 10.0, 10.0], [10.0, 10.0, 0.0]])
    idx = mech.exponential_mechanism(jax.random.key(0), scores, epsilon=1e3, sensitivity=1.0)
    np.testing.assert_array_equal(idx, [0, 2])
    f = jax.jit(jax.vmap(lambda e: mech.exponential_mechanism_probs(scores[0], epsilon=e, sensitivity=1.0)))
    p = f(jnp.array([1e-6, 1e3]))
    np.testing.assert_allclose(p[0], np.full(3, 1 / 3), atol=1e-5)
    np.testing.assert_allclose(p[1], [1, 0, 0], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon=0.0, sensitivity=1.0), "epsilon"),
        (dict(epsilon=1.0, sensitivity=-1.0), "sensitivity"),
    ],
)
def test_exponential_mechanism_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mech.exponential_mechanism(jax.random.key(0), jnp.zeros(3), **kwargs)


def test_validation_errors():
    with pytest.raises(ValueError, match="scores"):
        mech.exponential_mechanism_probs(jnp.array([0.0, jnp.nan]), epsilon=1.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="std"):
        mech.gaussian_mechanism(jax.random.key(0), jnp.zeros(3), -1.0)
    with pytest.raises(ValueError, match="scale"):
        mech.laplace_mechanism(jax.random.key(0), jnp.zeros(3), -0.1)
    with pytest.raises(ValueError, match="value_tree"):
        mech.gaussian_mechanism(jax.random.key(0), jnp.array([1.0, jnp.inf]), 1.0)
    with pytest.raises(ValueError, match="mismatched lengths"):
        mech.noisy_sufficient_statistics(jax.random.key(0), jnp.zeros((3, 2)), jnp.zeros(4),
                                         sigma_xx=1.0, sigma_xy=1.0)
    with pytest.raises(ValueError, match="key"):
        mech.gaussian_mechanism(jax.random.key(0, impl="rbg"), jnp.zeros(3), 1.0)


# --- raw primitives and sensitivity-aware adders ---------------------------------------------

from dpfair_jax.privacy import relations as rel  # noqa: E402


def test_raw_primitives_are_the_inline_draws_bitwise():
    key = jax.random.key(7)
    std = jnp.asarray([0.5, 2.0, 3.0])
    np.testing.assert_array_equal(mech.gaussian_noise(key, (4, 3), std),
                                  std * jax.random.normal(key, (4, 3), jnp.float32))
    np.testing.assert_array_equal(mech.laplace_noise(key, (5,), 1.25),
                                  1.25 * jax.random.laplace(key, (5,), jnp.float32))
    # traced scales under jit and vmap
    f = jax.jit(jax.vmap(lambda s: mech.gaussian_noise(key, (3,), s)))
    np.testing.assert_array_equal(f(std), std[:, None] * jax.random.normal(key, (3,)))


def test_raw_primitives_scale_statistics():
    _std_within(mech.gaussian_noise(jax.random.key(8), (N,), 1.7), 1.7)
    out = np.asarray(mech.laplace_noise(jax.random.key(9), (N,), 0.6), np.float64)
    assert abs(np.abs(out).mean() - 0.6) < 3 * 0.6 / np.sqrt(N)


@pytest.mark.parametrize("fn,arg", [(mech.gaussian_noise, -1.0), (mech.laplace_noise, float("nan"))])
def test_raw_primitives_refuse_negative_scale(fn, arg):
    with pytest.raises(ValueError, match="std|scale"):
        fn(jax.random.key(0), (2,), arg)


def test_raw_primitives_refuse_rbg_keys():
    with pytest.raises(ValueError, match="threefry"):
        mech.gaussian_noise(jax.random.key(0, impl="rbg"), (2,), 1.0)


@pytest.mark.parametrize("relation,factor", [("add_remove", 1.0), ("replace_one", 2.0),
                                             (rel.REPLACE_ONE, 2.0)])
def test_add_gaussian_scales_with_the_relation(relation, factor):
    key = jax.random.key(10)
    x = jnp.full((N,), 4.0)
    out = mech.add_gaussian(key, x, rel.clipped_sum_sensitivity(0.5), relation, 3.0)
    std = 3.0 * 0.5 * factor
    np.testing.assert_allclose(out, x + std * jax.random.normal(key, (N,)), rtol=1e-6)
    _std_within(np.asarray(out) - 4.0, std)


@pytest.mark.parametrize("relation,factor", [("add_remove", 1.0), ("replace_one", 2.0)])
def test_add_laplace_scales_with_the_relation(relation, factor):
    key = jax.random.key(11)
    sens = rel.bounded_sum_sensitivity(-1.0, 1.0)  # 1 (add/remove), 2 (replace one)
    out = np.asarray(mech.add_laplace(key, jnp.zeros(N), sens, relation, 0.5), np.float64)
    b = factor / 0.5
    assert abs(np.abs(out).mean() - b) < 3 * b / np.sqrt(N)


def test_adders_infinite_sensitivity_only_noiseless():
    inf_sens = rel.clipped_sum_sensitivity(float("inf"))
    x = jnp.arange(3.0)
    key = jax.random.key(0)
    np.testing.assert_array_equal(mech.add_gaussian(key, x, inf_sens, "add_remove", 0.0), x)
    np.testing.assert_array_equal(mech.add_laplace(key, x, inf_sens, "replace_one", float("inf")), x)
    with pytest.raises(ValueError, match="infinite"):
        mech.add_gaussian(key, x, inf_sens, "add_remove", 1.0)
    with pytest.raises(ValueError, match="infinite"):
        mech.add_laplace(key, x, inf_sens, "add_remove", 1.0)
    with pytest.raises(ValueError, match="infinite"):
        jax.jit(lambda z: mech.add_gaussian(key, x, inf_sens, "add_remove", z))(1.0)


def test_adders_refuse_bad_arguments():
    key, x = jax.random.key(0), jnp.zeros(2)
    with pytest.raises(ValueError, match="Sensitivity"):
        mech.add_gaussian(key, x, 1.0, "add_remove", 1.0)
    with pytest.raises(ValueError, match="swap"):
        mech.add_gaussian(key, x, rel.count_sensitivity(), "swap", 1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        mech.add_gaussian(key, x, rel.count_sensitivity(), "add_remove", -1.0)
    with pytest.raises(ValueError, match="epsilon"):
        mech.add_laplace(key, x, rel.count_sensitivity(), "add_remove", 0.0)


def test_histogram_sensitivity_from_relations():
    assert mech.histogram_sensitivity("add_remove") == 1.0
    assert mech.histogram_sensitivity("replace_one") == 2.0**0.5
    assert mech.histogram_sensitivity(rel.REPLACE_ONE) == rel.histogram_sensitivity("l2").replace_one
    with pytest.raises(ValueError, match="swap"):
        mech.histogram_sensitivity("swap")
