"""Theorem 2 decomposition (paper 001): parts add up to the measured one-step change; Lemma 2; Thm 3."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.analysis import decomposition as D
from dpfair_jax.data import synthetic


def _loss(theta, xi, yi):
    z = xi @ theta[:-1] + theta[-1]
    return jnp.logaddexp(0.0, z) - yi * z


@pytest.fixture(scope="module")
def problem():
    d = synthetic.two_group_classification(jax.random.key(0), 160, ratio=0.6, d=3, norms=[0.5, 3.0],
                                           margins=[1.0, 0.5]).data
    theta = jnp.array([0.3, -0.2, 0.1, 0.05])
    return d.x, d.y.astype(jnp.float32), d.s, theta


def test_parts_add_up_to_measured_one_step_change(problem):
    x, y, s, theta = problem
    kw = dict(learning_rate=0.2, clip_norm=0.5, noise_multiplier=3.0, batch_size=16)
    dec = D.theorem2_decomposition(_loss, theta, x, y, s, 2, **kw)
    mean, se = D.one_step_change_mc(jax.random.key(1), _loss, theta, x, y, s, 2, num_draws=3000, **kw)
    total = np.asarray(dec.nonprivate + dec.r_clip + dec.r_noise)
    np.testing.assert_allclose(total, np.asarray(dec.predicted_change), rtol=1e-6)
    # within Monte Carlo error plus a small third-order Taylor remainder
    tol = 4 * np.asarray(se) + 0.05 * np.abs(total)
    assert np.all(np.abs(np.asarray(mean) - total) < tol), (np.asarray(mean), total, np.asarray(se))
    assert np.all(np.asarray(dec.r_noise) > 0) and np.all(np.asarray(dec.r_clip) != 0)


def test_no_clipping_no_noise_terms(problem):
    x, y, s, theta = problem
    dec = D.theorem2_decomposition(_loss, theta, x, y, s, 2, learning_rate=0.1, clip_norm=1e6,
                                   noise_multiplier=0.0, batch_size=16)
    np.testing.assert_allclose(np.asarray(dec.r_clip), 0.0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(dec.r_noise), 0.0, atol=0)
    np.testing.assert_allclose(np.asarray(dec.psi), 0.0, atol=1e-6)


def test_noise_variant_scales_by_batch_squared(problem):
    x, y, s, theta = problem
    kw = dict(learning_rate=0.1, clip_norm=0.5, noise_multiplier=2.0, batch_size=8)
    a = D.theorem2_decomposition(_loss, theta, x, y, s, 2, **kw)
    b = D.theorem2_decomposition(_loss, theta, x, y, s, 2, variant="paper", **kw)
    np.testing.assert_allclose(np.asarray(b.r_noise), 64 * np.asarray(a.r_noise), rtol=1e-5)
    # R_noise = eta^2/2 Tr(H_a) (sigma C / B)^2 (Thm 4: larger trace, larger R_noise)
    np.testing.assert_allclose(np.asarray(a.r_noise), 0.5 * 0.01 * np.asarray(a.trace) * (2 * 0.5 / 8) ** 2, rtol=1e-5)


def test_lemma2_bounds_on_psi_full_batch(problem):
    x, y, s, theta = problem
    c = 0.3
    dec = D.theorem2_decomposition(_loss, theta, x, y, s, 2, learning_rate=0.1, clip_norm=c,
                                   noise_multiplier=1.0, batch_size=x.shape[0])
    beta = np.asarray(dec.hessian_max_eig)
    psi = np.asarray(dec.psi)
    gd = float(dec.population_grad_norm)
    assert np.all(psi <= beta * c ** 2 + 1e-7)
    assert np.all(psi >= -beta * gd ** 2 - 1e-7)


def test_theorem3_condition_implies_ordering():
    # group 0 far from its optimum (large gradient), group 1 nearly fitted
    x = jnp.concatenate([jnp.full((70, 1), 4.0), jnp.full((30, 1), -0.1)])
    y = jnp.concatenate([jnp.zeros(70), jnp.ones(30)])
    s = jnp.concatenate([jnp.zeros(70, jnp.int32), jnp.ones(30, jnp.int32)])
    theta = jnp.array([3.0, 0.0])
    c = 0.05
    dec = D.theorem2_decomposition(_loss, theta, x, y, s, 2, learning_rate=0.01, clip_norm=c,
                                   noise_multiplier=1.0, batch_size=100)
    gn = np.asarray(dec.grad_norm)
    p = np.asarray(dec.fraction)
    assert bool(D.theorem3_condition(gn[0], gn[1], p[0], p[1], c))
    assert float(dec.r_clip[0]) > float(dec.r_clip[1])
    assert not bool(D.theorem3_condition(gn[1], gn[0], p[1], p[0], c))


def test_jitted_vmap_over_clip_grid(problem):
    x, y, s, theta = problem
    f = jax.jit(jax.vmap(lambda c: D._decompose(_loss, theta, x, y, s, 0.1, c, 1.0, num_groups=2,
                                                   batch_size=16, variant="sum").r_clip))
    got = np.asarray(f(jnp.array([0.1, 1.0])))
    one = np.asarray(D.theorem2_decomposition(_loss, theta, x, y, s, 2, learning_rate=0.1, clip_norm=1.0,
                                              noise_multiplier=1.0, batch_size=16).r_clip)
    np.testing.assert_allclose(got[1], one, rtol=1e-5, atol=1e-9)
    norms = D.group_gradient_norms(_loss, theta, x, y, s, 2, 0.1)
    assert np.all(np.asarray(norms["clipped_grad_norm"]) <= 0.1 + 1e-6)  # Lemma 1


def test_validation(problem):
    x, y, s, theta = problem
    with pytest.raises(ValueError, match="batch_size"):
        D.theorem2_decomposition(_loss, theta, x, y, s, 2, learning_rate=0.1, clip_norm=1.0,
                                 noise_multiplier=1.0, batch_size=10_000)
    with pytest.raises(ValueError, match="variant"):
        D.theorem2_decomposition(_loss, theta, x, y, s, 2, learning_rate=0.1, clip_norm=1.0,
                                 noise_multiplier=1.0, batch_size=8, variant="avg")


def test_clip_norm_inf_is_the_unclipped_noiseless_step(problem):
    """clip_norm=inf leaves the gradients unclipped (the same terms as a clip no row reaches) and
    is refused with noise (infinite sensitivity)."""
    x, y, s, theta = problem
    kw = dict(learning_rate=0.1, noise_multiplier=0.0, batch_size=16)
    a = D.theorem2_decomposition(_loss, theta, x, y, s, 2, clip_norm=float("inf"), **kw)
    b = D.theorem2_decomposition(_loss, theta, x, y, s, 2, clip_norm=1e6, **kw)
    for f in ("loss", "clipped_grad_norm", "r_clip", "r_noise", "predicted_change"):
        np.testing.assert_allclose(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), rtol=1e-6,
                                   atol=1e-9, err_msg=f)
    assert np.all(np.isfinite(np.asarray(a.predicted_change)))
    m, se = D.one_step_change_mc(jax.random.key(2), _loss, theta, x, y, s, 2, clip_norm=np.inf,
                                 num_draws=8, **kw)
    assert np.all(np.isfinite(np.asarray(m)))
    with pytest.raises(ValueError, match="noise_multiplier=0"):
        D.theorem2_decomposition(_loss, theta, x, y, s, 2, learning_rate=0.1, clip_norm=np.inf,
                                 noise_multiplier=1.0, batch_size=16)
