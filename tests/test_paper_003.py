"""Tests of paper 003's theory functions and experiment (stratified private estimation)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from dpfair_jax.analysis import stratification_theory as th
from dpfair_jax.data import synthetic

N_ACS = 196967


def test_theorem9_closed_form_values():
    # independent SciPy evaluation and the notes' table (natural logs)
    for k, a, want in ((9, 0.13, 40.002), (9, 0.5, 79.546), (9, 1.0, 85.256), (3, 0.3, 28.330),
                       (12, 0.3, 90.631), (12, 3.0, 114.528)):
        got = float(th.dirichlet_expected_log_sizes(N_ACS, k, a))
        assert got == pytest.approx(k * (special.psi(a) - special.psi(k * a) + math.log(N_ACS)))
        assert got == pytest.approx(want, abs=2e-3)
    assert float(th.worst_case_log_sizes(N_ACS, 9)) == pytest.approx(89.942, abs=1e-3)
    assert float(th.best_case_log_sizes(N_ACS, 9)) == pytest.approx(20.191, abs=1e-3)
    assert float(th.best_case_log_sizes(N_ACS, 9, form="k_plus_log_n")) == pytest.approx(21.191, abs=1e-3)
    assert float(th.fraction_toward_best(N_ACS, 9, 0.13)) == pytest.approx(0.716, abs=1e-3)
    vals = th.dirichlet_expected_log_sizes(N_ACS, 6, np.array([0.3, 1.0, 10.0, 1000.0]))
    assert np.all(np.diff(vals) > 0) and np.all(vals <= th.worst_case_log_sizes(N_ACS, 6))
    assert vals[-1] == pytest.approx(float(th.worst_case_log_sizes(N_ACS, 6)), abs=0.01)


def test_theorem9_identity_monte_carlo():
    """E sum log(n g_i) = k(psi(alpha) - psi(k alpha) + log n) within 3 SE for the paper's (k, alpha),
    with g ~ Dir(alpha 1_k) drawn in log space by the data module (one jitted vmap per k)."""
    draws = 20000
    for k in (3, 6, 12):
        alphas = jnp.array([0.3, 0.5, 0.7, 1.0, 3.0, 10.0])
        keys = jax.random.split(jax.random.key(k), draws)

        @jax.jit
        def stat(keys, alphas):
            f = lambda kk, a: jnp.sum(math.log(N_ACS) + synthetic.dirichlet_log_proportions(kk, a, k))
            return jax.vmap(lambda a: jax.vmap(lambda kk: f(kk, a))(keys))(alphas)

        S = np.asarray(stat(keys, alphas), np.float64)
        theory = th.dirichlet_expected_log_sizes(N_ACS, k, np.asarray(alphas))
        se = S.std(axis=1, ddof=1) / math.sqrt(draws)
        z = (S.mean(axis=1) - theory) / se
        assert np.all(np.abs(z) < 3), (k, z)


def test_bounds_and_variances():
    n, R, g, eps = 10000, 3.0, 0.05, 1.0
    glob = th.global_laplace_bound(n, R, g, eps)
    assert glob == pytest.approx(math.log(20) * (3 + math.sqrt(math.log(n / g))) / n)
    assert th.prop8_bound(n, 1, R, g, eps) == pytest.approx(glob)
    ks = np.array([1, 4, 16, 64])
    b = th.prop8_bound(n, ks, R, g, eps)
    assert np.all(np.diff(b) > 0) and np.all(b <= np.sqrt(ks) * glob + 1e-15)
    # A2/A3 closed forms
    v = th.stratified_laplace_noise_variance([7000, 2000, 800, 150, 50], R, g, eps)
    assert v == pytest.approx(1.4691e-5, rel=1e-4)
    assert th.stratified_laplace_noise_variance([10000], R, g, eps) == pytest.approx(
        th.global_laplace_noise_variance(n, R, g, eps))
    assert th.stratified_laplace_noise_variance([5, 0, 5], R, g, eps, relation="add_remove") == pytest.approx(
        th.stratified_laplace_noise_variance([5, 0, 5], R, g, eps) / 4)
    assert th.stratified_gaussian_noise_variance(100, [1.0] * 4, 0.5) == pytest.approx(4 * (2 / 100) ** 2)


def test_fit_symmetric_dirichlet_alpha():
    rng = np.random.default_rng(0)
    for a in (0.3, 1.0, 4.0):
        g = rng.dirichlet([a] * 8, size=600)
        fit = th.fit_symmetric_dirichlet_alpha(g)
        # MLE: relative SE ~ 1/sqrt(m k); allow 15%
        assert fit == pytest.approx(a, rel=0.15)
        assert th.fit_symmetric_dirichlet_alpha(g, method="moment") == pytest.approx(a, rel=0.2)
    # MLE score root against a direct maximization of the SciPy log-likelihood
    g = rng.dirichlet([0.7] * 5, size=50)
    grid = np.linspace(0.3, 1.5, 2401)
    ll = [stats.dirichlet.logpdf(g.T, [a] * 5).sum() for a in grid]
    assert th.fit_symmetric_dirichlet_alpha(g) == pytest.approx(grid[int(np.argmax(ll))], abs=1e-3)
    with pytest.raises(ValueError, match="proportions"):
        th.fit_symmetric_dirichlet_alpha([[1.0]])
    with pytest.raises(ValueError, match="gamma"):
        th.prop8_bound(100, 2, 1.0, 1.5, 1.0)


def test_mixture_trial_vectorized_grid():
    """The Fig. 3 trial is jit/vmap-able over traced (n, k, alpha): padded rows and groups."""
    from dpfair_jax.experiments.paper_003 import mixture_trial

    fn = functools.partial(mixture_trial, n_max=3000, k_max=6, rhos=jnp.array([0.125, 0.375]))
    keys = jax.random.split(jax.random.key(0), 8)
    grid_n = jnp.array([1000.0, 3000.0])
    grid_k = jnp.array([2, 6])
    out = jax.jit(jax.vmap(jax.vmap(lambda kk, n, k: fn(kk, n, k, 0.5), in_axes=(0, None, None)),
                           in_axes=(None, 0, 0)))(keys, grid_n, grid_k)
    for name in ("coinpress", "strat", "pub_strat", "reference_code"):
        assert out[name].shape == (2, 8)
        assert np.all(np.isfinite(np.asarray(out[name])))
    npriv = np.asarray(out["n_private"])
    assert np.all(np.abs(npriv - grid_n[:, None] / 2) < 4 * np.sqrt(np.asarray(grid_n)[:, None] / 4))
    # the non-private reference semantics is far more accurate than any private estimate
    assert np.median(np.asarray(out["reference_code"])) < np.median(np.asarray(out["coinpress"]))


def test_experiment_quick_smoke(tmp_path):
    from dpfair_jax.experiments import context, registry

    registry.discover()
    exp = registry.get("paper_003")
    over = {"parts": ["theory", "mixture"], "thm9_ks": [3, 12], "thm9_alphas": [0.3, 3.0],
            "thm9_draws": 2000, "tail_draws": 20000, "var_draws": 500, "prop8_n": 2000,
            "prop8_ks": [1, 4], "prop8_draws": 500, "ns": [2000, 4000], "ks": [3], "alphas": [0.5, 3.0],
            "runs": 4, "chunk_size": 16}
    res = context.run_experiment(exp, size="quick", overrides=over, root=str(tmp_path), fresh=True)
    run_dir = tmp_path / "runs" / "paper_003"
    import json

    claims = json.loads((run_dir / "claims.json").read_text())
    ids = {c["id"] for c in claims}
    assert {"thm9_identity", "strat_laplace_var", "mixture_converges", "reference_code_bug"} <= ids
    assert (run_dir / "mixture.csv").exists() and (run_dir / "figures" / "mixture.png").exists()
    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["coinpress_and_stratcoinpress_rho"]["rho"] == pytest.approx(0.5)
    assert res is not None
