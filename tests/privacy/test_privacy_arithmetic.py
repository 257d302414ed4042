"""The privacy arithmetic around the noise, each against an independent reference.

Sensitivities against their worst case over neighbours or their closed forms (traced as well as
concrete), composed events against dp-accounting called on the event written out here, clipping
against a NumPy loop with exact ``norm <= C``. Each check states the property in general, for
inputs a one-line slip in the arithmetic would get wrong (``tests/mutation/privacy_arithmetic.py``
applies such slips and checks that the default suite notices; docs/privacy_mutants.md).
"""

from __future__ import annotations

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import clipping as C


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


# ------------------------------------------------------------------------------- clipping
def test_clip_per_example_against_numpy_with_rows_below_and_above_the_bound():
    """``clip_per_example`` over a two-leaf pytree against NumPy: rows above ``C`` scaled by
    ``C / norm`` (ending on the bound, never above it beyond float32 rounding), rows below and a
    zero row unchanged, and the unclipped norms returned."""
    rng = np.random.default_rng(3)
    c = 0.7
    scales = np.array([0.0, 0.05, 0.3, 0.69, 0.71, 2.0, 40.0], np.float32)  # a zero row, both sides of C
    a = rng.normal(size=(7, 3)).astype(np.float32)
    b = rng.normal(size=(7, 2, 2)).astype(np.float32)
    raw = np.sqrt((a**2).sum(1) + (b.reshape(7, -1) ** 2).sum(1))
    a, b = a * (scales / np.maximum(raw, 1e-30))[:, None], b * (scales / np.maximum(raw, 1e-30))[:, None, None]
    clipped, norms = C.clip_per_example({"a": jnp.asarray(a), "b": jnp.asarray(b)}, c)
    ref_norms = np.sqrt((a.astype(np.float64) ** 2).sum(1) + (b.astype(np.float64).reshape(7, -1) ** 2).sum(1))
    np.testing.assert_allclose(np.asarray(norms), ref_norms, rtol=1e-6, atol=1e-7)
    factor = np.minimum(1.0, c / np.maximum(ref_norms, 1e-30))
    np.testing.assert_allclose(np.asarray(clipped["a"]), a * factor[:, None], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(np.asarray(clipped["b"]), b * factor[:, None, None], rtol=1e-5, atol=1e-8)
    out = np.sqrt((np.asarray(clipped["a"], np.float64) ** 2).sum(1)
                  + (np.asarray(clipped["b"], np.float64).reshape(7, -1) ** 2).sum(1))
    assert np.all(out <= c * (1 + 1e-6))
    np.testing.assert_allclose(out[ref_norms > c], c, rtol=1e-5)


@pytest.mark.parametrize("method", ["gram", "direct"])
def test_dense_ghost_norms_against_numpy_per_example_gradients(method):
    """``ghost.dense_norm_sq`` against the squared norms of per-example gradients formed in NumPy:
    rows ``z = a W + b`` (``grad W = a^T g``, ``grad b = g``) and sequences with weights shared over
    positions (``grad W = A^T G``, ``grad b = sum_t g_t``), with and without the bias, at sizes
    where the squared norms lie on both sides of 1 (a norm returned for its square would fail)."""
    from dpfair_jax.privacy import ghost

    rng = np.random.default_rng(4)
    a = (rng.normal(size=(5, 4)) * np.array([0.1, 0.3, 1.0, 3.0, 10.0])[:, None]).astype(np.float32)
    g = rng.normal(size=(5, 3)).astype(np.float32)
    w_sq = np.array([np.sum(np.outer(a[i], g[i]).astype(np.float64) ** 2) for i in range(5)])
    b_sq = np.sum(g.astype(np.float64) ** 2, axis=1)
    np.testing.assert_allclose(np.asarray(ghost.dense_norm_sq(a, g, method=method)), w_sq + b_sq, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ghost.dense_norm_sq(a, g, bias=False, method=method)), w_sq, rtol=1e-5)
    a3 = (rng.normal(size=(5, 6, 4)) * np.array([0.05, 0.2, 1.0, 3.0, 10.0])[:, None, None]).astype(np.float32)
    g3 = rng.normal(size=(5, 6, 3)).astype(np.float32)
    w3 = np.array([np.sum((a3[i].T.astype(np.float64) @ g3[i]) ** 2) for i in range(5)])
    b3 = np.sum(g3.astype(np.float64).sum(axis=1) ** 2, axis=1)
    assert w3.min() < 1.0 < w3.max()
    np.testing.assert_allclose(np.asarray(ghost.dense_norm_sq(a3, g3, method=method)), w3 + b3, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(ghost.gram_norm_sq(a3, g3, method=method)), w3, rtol=1e-4)


def test_total_norms_combine_every_layer():
    """The per-example norm over layers is ``sqrt(sum_l ||grad_l||^2)``: every layer counts (three
    layers whose squared norms differ by orders of magnitude, against NumPy)."""
    from dpfair_jax.privacy import ghost

    rng = np.random.default_rng(5)
    sq = [rng.uniform(0.0, 1.0, 6) * s for s in (0.01, 1.0, 100.0)]
    got = ghost.total_norms(*(jnp.asarray(x, jnp.float32) for x in sq))
    np.testing.assert_allclose(np.asarray(got), np.sqrt(np.sum(sq, axis=0)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ghost.total_norms(jnp.asarray(sq[2], jnp.float32))), np.sqrt(sq[2]), rtol=1e-6)
