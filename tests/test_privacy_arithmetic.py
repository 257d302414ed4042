"""The privacy arithmetic around the noise, each against an independent reference.

Sensitivities against their worst case over neighbours or their closed forms (traced as well as
concrete), composed events against dp-accounting called on the event written out here, clipping
against a NumPy loop with exact ``norm <= C``. Each check states the property in general, for
inputs a one-line slip in the arithmetic would get wrong (``tests/mutation/privacy_arithmetic.py``
applies such slips and checks that the default suite notices; docs/privacy_mutants.md).
"""

from __future__ import annotations

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import clipping as C

NR = dp_accounting.NeighboringRelation


# ------------------------------------------------------------------------------- sensitivities
@pytest.mark.parametrize("relation, factor", [("add_remove", 1.0), ("replace_one", 2.0)])
def test_clipped_sum_sensitivity_traced_equals_concrete(relation, factor):
    """``ClippedGradSum.sensitivity`` is ``C`` / ``2 C`` whether the clip norm is concrete or traced
    (a grid of clip norms under jit/vmap)."""
    cs = jnp.asarray([0.5, 1.0, 3.0], jnp.float32)

    def sens(c):
        return C.ClippedGradSum({"w": jnp.zeros(2)}, jnp.zeros(4), jnp.zeros(4), c).sensitivity(relation)

    traced = jax.jit(jax.vmap(sens))(cs)
    np.testing.assert_allclose(np.asarray(traced), factor * np.asarray(cs), rtol=1e-7)
    for c in (0.5, 3.0):
        assert float(sens(c)) == pytest.approx(factor * c, rel=1e-12)


# ------------------------------------------------------------------------------- composition
def test_pld_of_nested_gaussians_is_dp_accounting_on_the_effective_gaussian():
    """A Poisson-sampled step releasing one Gaussian and a self-composition of three is, by the
    Gaussian composition identity, one sampled Gaussian of multiplier ``(z1^-2 + 3 z2^-2)^-1/2``;
    the kit's PLD path (which rewrites such nests) must give dp-accounting's epsilon of that."""
    z1, z2, k, q, steps, delta = 1.2, 2.5, 3, 0.05, 40, 1e-5
    inner = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z1),
                                           dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z2), k)])
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, inner), steps)
    z_eff = (z1**-2 + k * z2**-2) ** -0.5
    ref = dp_accounting.pld.PLDAccountant().compose(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z_eff)), steps).get_epsilon(delta)
    assert A.epsilon_of_event(event, delta, accountant="pld") == pytest.approx(ref, rel=1e-9)
    rdp = dp_accounting.rdp.RdpAccountant().compose(event).get_epsilon(delta)
    assert A.epsilon_of_event(event, delta, accountant="rdp") == pytest.approx(rdp, rel=1e-9)
