"""privacy.zcdp_noise: each traced noise scale against its closed form (and against the host-side
float64 arithmetic of privacy.accounting where that has one)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy import zcdp_noise as Z


def test_gaussian_std_is_the_zcdp_calibration():
    # sigma = Delta / sqrt(2 rho): Delta = 2, rho = 0.5 -> 2; its rho (Delta^2 / (2 sigma^2)) is 0.5
    assert float(Z.gaussian_std(2.0, jnp.float32(0.5))) == 2.0
    sens, rho = np.array([1.0, 3.0]), np.array([0.125, 2.0])
    got = np.asarray(Z.gaussian_std(jnp.asarray(sens, jnp.float32), jnp.asarray(rho, jnp.float32)))
    np.testing.assert_allclose(got, [2.0, 1.5], rtol=1e-7)
    np.testing.assert_allclose(got, acc.gaussian_sigma_for_rho(sens, rho), rtol=1e-7)
    np.testing.assert_allclose(acc.gaussian_rho(sens, got), rho, rtol=1e-6)
    # traced budgets (a grid under vmap)
    grid = jax.vmap(lambda r: Z.gaussian_std(1.0, r))(jnp.asarray([0.5, 2.0], jnp.float32))
    np.testing.assert_allclose(grid, [1.0, 0.5], rtol=1e-7)


def test_gaussian_std_or_zero_has_no_noise_at_infinite_budget():
    out = np.asarray(Z.gaussian_std_or_zero(1.0, jnp.asarray([0.5, jnp.inf], jnp.float32)))
    np.testing.assert_array_equal(out, [1.0, 0.0])


def test_gaussian_stds_at_rho_share_one_unit():
    g, l_ = Z.gaussian_stds_at_rho(jnp.asarray([0.5, 2.0, 0.0], jnp.float32), 4.0, 1.0)
    np.testing.assert_allclose(np.asarray(g)[:2], [4.0, 2.0], rtol=1e-7)  # 4 / sqrt(1), 4 / sqrt(4)
    np.testing.assert_allclose(np.asarray(l_)[:2], [1.0, 0.5], rtol=1e-7)
    assert np.isinf(np.asarray(g)[2]) and np.isinf(np.asarray(l_)[2])  # no budget: no finite noise


def test_gaussian_std_per_step_composes_to_rho():
    # T releases of std Delta sqrt(T / (2 rho)) each spend rho / T: Delta = 2, rho = 1, T = 8 -> 4
    assert float(Z.gaussian_std_per_step(2.0, jnp.float32(1.0), 8)) == 4.0
    assert Z.host_gaussian_std_per_step(2.0, 1.0, 8) == 4.0
    std = Z.host_gaussian_std_per_step(1.5, 0.3, 7)
    assert 7 * acc.gaussian_rho(1.5, std) == pytest.approx(0.3, rel=1e-12)


def test_laplace_scale_and_pure_dp_conversions():
    assert float(Z.laplace_scale(3.0, jnp.float32(1.5))) == 2.0  # b = Delta_1 / epsilon
    assert float(Z.pure_dp_rho(2.0)) == 2.0  # epsilon^2 / 2
    assert float(Z.pure_dp_rho(0.3)) == pytest.approx(acc.pure_dp_to_rho(0.3), rel=1e-7)
    assert Z.pure_dp_epsilon(2.0) == 2.0  # sqrt(2 rho)
    assert Z.pure_dp_epsilon(acc.pure_dp_to_rho(0.7)) == pytest.approx(0.7, rel=1e-15)


def test_clip_to_ball_scale_projects_onto_the_ball():
    v = jnp.asarray([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]], jnp.float32)  # norms 5, 0.5, 0
    norms = jnp.sqrt(jnp.sum(v * v, axis=1))
    scale = Z.clip_to_ball_scale(norms, 2.0)
    np.testing.assert_allclose(np.asarray(scale), [0.4, 1.0, 1.0], rtol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(v * scale[:, None]), axis=1), [2.0, 0.5, 0.0],
                               rtol=1e-6)
    assert math.isclose(float(Z.clip_to_ball_scale(jnp.float32(10.0), jnp.float32(2.5))), 0.25)
