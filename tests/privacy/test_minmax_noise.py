"""privacy.minmax_noise against closed forms: the std on a clipped sum is ``z C k`` (0 at ``z = 0``,
also for ``C = inf``), its inverse, the per-step shift of two Gaussian releases
``sqrt(z_a^-2 + z_b^-2)`` (equal to the shift of one Gaussian of the composed zCDP rho), and the
random iterate's law (uniform on 1..T)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import minmax_noise as MM


@pytest.mark.parametrize("z, c, k", [(1.3, 0.7, 1.0), (0.5, 2.0, 2.0), (0.0, math.inf, 2.0), (2.0, 1.0, 1.0)])
def test_clipped_sum_std_and_its_inverse(z, c, k):
    std = float(MM.clipped_sum_std(z, c, k))
    want = 0.0 if z == 0 else float(np.float32(z) * np.float32(c) * k)
    assert std == pytest.approx(want, rel=1e-7)
    if z > 0:
        assert MM.multiplier_of_std(z * c * k, c, k) == pytest.approx(z, rel=1e-12)


@pytest.mark.parametrize("za, zb", [(1.0, 1.0), (0.8, 3.0), (5.0, 0.4)])
def test_combined_shift_is_the_composed_gaussian(za, zb):
    mu = MM.combined_shift(za, zb)
    # two Gaussian releases compose to rho = 1/(2 za^2) + 1/(2 zb^2), one Gaussian of shift sqrt(2 rho)
    rho = A.gaussian_rho(1.0, za) + A.gaussian_rho(1.0, zb)
    assert mu == pytest.approx(math.sqrt(2.0 * rho), rel=1e-12)
    ratio = zb / za
    assert MM.multiplier_for_shift(mu, ratio) == pytest.approx(za, rel=1e-12)


def test_random_iterate_is_uniform_on_one_to_steps():
    T, m = 7, 14000
    draws = np.asarray(jax.vmap(lambda k: MM.random_iterate(k, T))(jax.random.split(jax.random.key(0), m)))
    assert draws.min() == 1 and draws.max() == T
    counts = np.bincount(draws, minlength=T + 1)[1:]
    # each count ~ Binomial(m, 1/T): within 5 standard deviations
    sd = math.sqrt(m * (1 / T) * (1 - 1 / T))
    assert np.all(np.abs(counts - m / T) < 5 * sd), counts
