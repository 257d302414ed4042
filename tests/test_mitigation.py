"""(gamma1, gamma2) mitigation (paper 001, reconstruction): zero gammas = DP-SGD bit for bit, the
penalty gradient, private statistics, accounting."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models
from dpfair_jax.algorithms import dpsgd, mitigation
from dpfair_jax.data import synthetic
from dpfair_jax.privacy import accounting


@pytest.fixture(scope="module")
def setup():
    data = synthetic.two_group_classification(jax.random.key(0), 200, ratio=0.4, d=3, norms=[0.5, 2.0],
                                              margins=[1.0, 0.3]).data
    model = models.mlp(hidden=(4,), out=1, activation="tanh", input_dim=3)
    params = model.init(jax.random.key(1))
    return data, model, params


KW = dict(clip_norm=0.1, noise_multiplier=5.0, learning_rate=0.05, batch_size=16, steps=12)


def test_zero_gammas_equal_dpsgd_bit_for_bit(setup):
    data, model, params = setup
    key = jax.random.key(42)
    p_ref, _ = dpsgd.train(key, model, params, data, per_example="vmap", **KW)
    p_mit, diag = mitigation.train(key, model, params, data, gamma1=0.0, gamma2=0.0,
                                   stats_noise_multiplier=5.0, **KW)
    for a, b in zip(jax.tree_util.tree_leaves(p_ref), jax.tree_util.tree_leaves(p_mit)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert diag["private_group_fraction"].shape == (12, 2)


def test_nonzero_gammas_change_the_update_and_vmap_grid(setup):
    data, model, params = setup
    key = jax.random.key(3)

    def run(g1, g2):
        return mitigation.train(key, model, params, data, gamma1=g1, gamma2=g2, stats_noise_multiplier=1.0,
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


def test_private_statistics_noise_scale(setup):
    """The released group statistics carry N(0, (z_s sqrt 3)^2) noise on the group counts."""
    data, model, params = setup
    _, diag = mitigation.train(jax.random.key(5), model, params, data, gamma1=0.0, gamma2=0.0,
                               stats_noise_multiplier=0.0, **KW)
    frac0 = np.asarray(diag["private_group_fraction"])
    # without noise the fractions are the batch's exact group fractions (expected p = 57/200 for group 1)
    assert np.all(np.abs(frac0.sum(1) - 1) < 1e-5)
    assert abs(frac0[:, 1].mean() - float(np.mean(np.asarray(data.s)))) < 0.1


def test_privacy_composes_both_gaussians():
    z, zs, n, b, steps, delta = 5.0, 5.0, 1000, 32, 100, 1e-5
    sp = mitigation.privacy(z, zs, n=n, batch_size=b, steps=steps, delta=delta)
    eff = accounting.effective_noise_multiplier([z, zs])
    ref = accounting.dpsgd_epsilon(eff, b / n, steps, delta)
    assert sp.epsilon == pytest.approx(ref, rel=1e-6)
    plain = mitigation.privacy(z, zs, n=n, batch_size=b, steps=steps, delta=delta, include_statistics=False)
    assert plain.epsilon == pytest.approx(accounting.dpsgd_epsilon(z, b / n, steps, delta), rel=1e-6)
    assert plain.epsilon < sp.epsilon


def test_validation(setup):
    data, model, params = setup
    with pytest.raises(ValueError, match="gamma1"):
        mitigation.train(jax.random.key(0), model, params, data, gamma1=-1.0, gamma2=0.0,
                         stats_noise_multiplier=1.0, **KW)
    with pytest.raises(ValueError, match="Dataset"):
        mitigation.train(jax.random.key(0), model, params, (data.x, data.y), gamma1=0.0, gamma2=0.0,
                         stats_noise_multiplier=1.0, **KW)
