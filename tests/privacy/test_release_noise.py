"""privacy.release_noise: each scale and sensitivity against its closed form, the draws against
their stated law."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.privacy import accounting as acc
from dpfair_jax.privacy import release_noise as rn


def test_minimizer_sensitivity_is_2L_over_n_reg_host_and_traced():
    assert rn.minimizer_sensitivity(50, 0.5, 3.0) == pytest.approx(2 * 3.0 / (50 * 0.5), rel=1e-15)
    traced = jax.jit(lambda reg, lip: rn.minimizer_sensitivity(50, reg, lip))(jnp.float32(0.5), jnp.float32(3.0))
    assert float(traced) == pytest.approx(0.24, rel=1e-6)


def test_gaussian_release_std_and_law():
    value = jnp.zeros(20000)
    out, std = rn.gaussian_release(jax.random.key(0), value, 0.25, 2.0)
    assert std == 0.5
    sd = float(np.std(np.asarray(out, np.float64)))
    assert abs(sd - 0.5) < 4 * 0.5 / math.sqrt(2 * 20000)  # se of a sample std


def test_one_hot_gram_sensitivity_counts_one_rows_upper_triangle():
    for d, domains in ((1, (3,)), (3, (2, 3, 4))):
        codes = np.asarray([[m - 1 for m in domains]])
        onehot = np.concatenate([np.eye(m)[codes[:, j]] for j, m in enumerate(domains)], axis=1)
        gram = onehot.T @ onehot
        sens = rn.one_hot_gram_sensitivity(d)
        assert sens.under("add_remove") == pytest.approx(math.sqrt(np.sum(np.triu(gram) ** 2)), rel=1e-12)
        assert sens.under("replace_one") == pytest.approx(math.sqrt(2) * sens.under("add_remove"), rel=1e-12)


def test_zcdp_gaussian_std_is_sens_over_sqrt_2rho():
    assert float(rn.zcdp_gaussian_std(3.0, 0.5)) == pytest.approx(3.0 / math.sqrt(1.0), rel=1e-6)
    # rho-zCDP: Delta^2 / (2 sigma^2) = rho
    sigma = float(rn.zcdp_gaussian_std(2.0, 0.3))
    assert 2.0**2 / (2 * sigma**2) == pytest.approx(0.3, rel=1e-6)


def test_add_gaussian_for_rho_host_std():
    out = rn.add_gaussian_for_rho_host(jax.random.key(1), np.zeros(20000), 1.0, 2.0)
    assert out.dtype == np.float64
    want = 1.0 / math.sqrt(4.0)
    assert abs(float(np.std(out)) - want) < 4 * want / math.sqrt(2 * 20000)


def test_itemized_loss_sensitivity_and_lipschitz_image():
    assert rn.itemized_loss_sensitivity(100, 4) == pytest.approx(2.0 / 100)
    assert rn.itemized_loss_sensitivity(100, 4, norm="l1") == pytest.approx(4.0 / 100)
    with pytest.raises(ValueError, match="norm"):
        rn.itemized_loss_sensitivity(100, 4, norm="linf")
    assert rn.lipschitz_image_sensitivity(0.02, 3.0) == pytest.approx(0.06)


def test_laplace_scale_and_epsilon_are_inverse():
    assert rn.laplace_scale(0.04, 0.5) == pytest.approx(0.08)
    assert rn.laplace_epsilon(0.04, 0.08) == pytest.approx(0.5)
    eps = jax.jit(lambda s: rn.laplace_epsilon(0.04, s))(jnp.asarray([0.08, 0.0], jnp.float32))
    assert float(eps[0]) == pytest.approx(0.5, rel=1e-6) and math.isinf(float(eps[1]))


def test_normalized_clipped_sum_and_steps_std():
    sens = rn.normalized_clipped_sum_sensitivity(0.5)
    assert sens.under("replace_one") == 1.0 and math.isinf(sens.under("add_remove"))
    rho = acc.dp_to_rho(1.0, 1e-5)
    assert rn.gaussian_std_over_steps(1.0, 1e-5, 50, 1.0) == pytest.approx(1.0 / math.sqrt(2 * rho / 50), rel=1e-12)
