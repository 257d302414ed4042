"""Default paths whose recorded spend was not an upper bound, and their corrections.

1. ``aggregation.group_weighted_dp_aggregate`` divided by the realized group counts of the batch
   by default (private: one record changes its group's count); public denominators are now required.
2. ``output_perturbation.fit`` took its feature-norm bound from the data by default; a public
   ``radius`` is now required (checked before any compute).
3. ``dpsgd_spend_kw(sampling="shuffle")`` (and ``fermi`` all-features with shuffled batches)
   accounted shuffled epochs as sampling without replacement, which is not proven; they are now
   accounted without amplification: ``ceil(steps / steps_per_epoch)`` composed Gaussians.
4. The Poisson rate ``q = batch_size / n`` treats the dataset size ``n`` as public (documented).

Every reference below is independent of the code under test: closed-form Gaussian curves with
``scipy.stats.norm`` and exact arithmetic on zero-noise releases.
"""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

from dpfair_jax import models as M
from dpfair_jax.algorithms import dpsgd
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms import output_perturbation as OP
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import aggregation as agg
from dpfair_jax.privacy import sampling as smp
from _sgd_keywords import dpsgd_spend_kw



def _privacy(cfg, n, zt, zw, delta):
    """fermi's spend at these multipliers and delta (the trio's spend with the delta in the config)."""
    return F.spend(dataclasses.replace(cfg, delta=delta), n, F.FermiHparams(noise_theta=zt, noise_w=zw))


def _calibrate_noise(cfg, n, epsilon, delta, w_relative=1.0):
    """``(noise_theta, noise_w)`` of fermi's calibrate for ``(epsilon, delta)`` at ``w_relative``."""
    hp = F.calibrate(dataclasses.replace(cfg, delta=delta, w_relative=w_relative), n, (epsilon, delta))
    return hp.noise_theta, hp.noise_w


def _gaussian_delta(mu: float, eps: float) -> float:
    """delta(eps) of a Gaussian pair with shift / std ``mu`` (Balle & Wang 2018, Thm 8), SciPy."""
    return float(stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu))


def _gaussian_eps(mu: float, delta: float) -> float:
    return float(optimize.brentq(lambda e: _gaussian_delta(mu, e) - delta, 0.0, 200.0, xtol=1e-13))


# ------------------------------------------------------------------------------------------------
# 1. group-weighted aggregation: public denominators required
# ------------------------------------------------------------------------------------------------
_KW = dict(clip_norm=3.0, noise_multipliers=jnp.array([1.0, 2.0]), group_weights=jnp.array([0.9, 0.1]),
           num_groups=2, key=0)


def test_group_weighted_dp_aggregate_refuses_realized_denominators():
    """Fails on the former code, whose default divided by the batch's realized group counts."""
    for den in ({}, {"denominators": None}):
        with pytest.raises(ValueError, match="public denominators"):
            agg.group_weighted_dp_aggregate(**_KW, **den)
    with pytest.raises(ValueError, match=r"denominators must have shape \[2\]"):
        agg.group_weighted_dp_aggregate(**_KW, denominators=jnp.ones(3))
    with pytest.raises(ValueError, match="denominators"):
        agg.group_weighted_dp_aggregate(**_KW, denominators=jnp.array([-1.0, 2.0]))


def _two_gaussian_eps(a: tuple[float, float], b: tuple[float, float], delta: float) -> float:
    """Exact epsilon at ``delta`` of the pair N(a) vs N(b) (means and stds; unequal variances), both
    directions, by quadrature of the hockey-stick divergence on a fine grid (NumPy/SciPy)."""
    lo = min(a[0], b[0]) - 14 * max(a[1], b[1])
    hi = max(a[0], b[0]) + 14 * max(a[1], b[1])
    x, dx = np.linspace(lo, hi, 400_001, retstep=True)
    pa, pb = stats.norm.pdf(x, *a), stats.norm.pdf(x, *b)

    def d(e):
        return max(np.sum(np.maximum(pa - math.exp(e) * pb, 0.0)), np.sum(np.maximum(pb - math.exp(e) * pa, 0.0))) * dx

    return float(optimize.brentq(lambda e: d(e) - delta, 0.0, 30.0, xtol=1e-7))


def test_group_weighted_dp_aggregate_shift_is_the_accounted_one():
    """The audit's pair (group 0: 10 rows clipped to +C e_1, group 1: 40 rows, weights (0.9, 0.1),
    group 0 calibrated to (1, 1e-2), group 1 at twice its multiplier; the canary -C e_1 joins group
    0). At zero noise the canary moves the release by exactly ``w_0 C / n_0`` with the public
    denominators, and with the former default (realized counts) by ``2 n_0 / (n_0 + 1)`` times that
    while its noise std shrinks by ``n_0 / (n_0 + 1)``. Exact epsilons of the released coordinate:
    <= 1 now, > 3 for the former default (the sampled audit bound was 2.42)."""
    from dpfair_jax.privacy.accounting import analytic_gaussian_sigma

    n0, n1, c = 10, 40, 3.0
    x = np.zeros((n0 + n1 + 1, 2), np.float32)
    x[:n0, 1] = 300.0
    x[n0:n0 + n1, 0] = 300.0
    x[-1, 1] = -300.0
    s = jnp.asarray([0] * n0 + [1] * n1 + [0], jnp.int32)
    masks = (jnp.ones(n0 + n1 + 1).at[-1].set(0.0), jnp.ones(n0 + n1 + 1))
    public = jnp.array([n0, n1], jnp.float32)
    tx = agg.group_weighted_dp_aggregate(**dict(_KW, noise_multipliers=jnp.zeros(2)), denominators=public)
    means = [float(tx.update(jnp.asarray(x), tx.init(None), groups=s, mask=m)[0][1]) for m in masks]
    assert means[0] - means[1] == pytest.approx(0.9 * c / n0, rel=1e-6)
    counts = [agg.group_counts(s, 2, m) for m in masks]  # what the former default divided by
    former = [float(agg.combine_group_means(agg.group_clipped_sums(jnp.asarray(x), s, 2, c, m), _KW["group_weights"],
                                            cnt)[1]) for m, cnt in zip(masks, counts)]
    assert (former[0] - former[1]) / (0.9 * c / n0) == pytest.approx(2 * n0 / (n0 + 1), rel=1e-5)
    z0 = analytic_gaussian_sigma(1.0, 1e-2, 1.0)
    g1 = 0.1 * 2 * z0 * c / n1  # group 1's noise on the released coordinate

    def law(mean, n0_den):
        return mean, math.hypot(0.9 * z0 * c / n0_den, g1)

    eps_now = _two_gaussian_eps(law(means[0], n0), law(means[1], n0), 1e-2)
    eps_former = _two_gaussian_eps(law(former[0], n0), law(former[1], n0 + 1), 1e-2)
    assert eps_now <= 1.0 + 1e-4
    assert eps_former > 3.0


# ------------------------------------------------------------------------------------------------
# 2. output perturbation: public radius required
# ------------------------------------------------------------------------------------------------
def test_output_perturbation_requires_public_radius_before_compute(monkeypatch):
    """Fails on the former code, whose default radius was the data's largest row norm."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(20, 3)), jnp.float32)
    y = jnp.asarray(np.arange(20) % 2, jnp.int32)

    def boom(*a, **k):
        raise AssertionError("fit computed before checking radius")

    monkeypatch.setattr(OP, "_minimize_jit", boom)
    cfg = OP.OutputPerturbationConfig()
    # no radius, the default public radius 1 below the rows' norms, a zero radius: refused first
    for hp in (OP.OutputPerturbationHparams(radius=None), OP.OutputPerturbationHparams(),
               OP.OutputPerturbationHparams(radius=0.0)):
        with pytest.raises(ValueError, match="radius"):
            OP.fit(jax.random.key(0), (x, y), hp, cfg)
    monkeypatch.undo()
    r = float(np.linalg.norm(np.asarray(x), axis=1).max()) * 1.01
    res = OP.fit(jax.random.key(0), (x, y), OP.OutputPerturbationHparams(radius=r), cfg)
    assert float(res.diagnostics["sensitivity"]) == pytest.approx(2 * math.sqrt(r**2 + 1) / 20, rel=1e-6)


@pytest.mark.slow
def test_paper_001_output_perturbation_noise_uses_the_configured_radius():
    """The experiment's noise scale comes from the config's public radius (5), not from the data:
    on rows of norm at most 0.5 the sensitivity and noise std are still those of radius 5."""
    from _studies import load_study, load_study_module

    P = load_study("paper_001")
    load_dataset = load_study_module("paper_001", "datasets").load_dataset
    (train, _), _ = load_dataset("synthetic", synthetic={"n": 120, "d": 3})
    small = train.replace(x=train.x * (0.5 / float(np.linalg.norm(np.asarray(train.x), axis=1).max())))
    cfg = dict(P.EXPERIMENTS[0].configs["quick"], epsilons=[1.0], num_draws=20, probes=2)
    assert P.EXPERIMENTS[0].name == "lens_output_perturbation" and cfg["radius"] == 5.0
    f = P._op_dataset("synthetic", small, cfg, 0)
    want = OP.sensitivity(train.n, cfg["reg"], OP.lipschitz_constant(cfg["radius"], reg=cfg["reg"]))
    assert np.allclose(f["sensitivity"], want, rtol=1e-12)
    assert np.allclose(f["std"], OP.noise_std(1.0, cfg["delta"], want), rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# 3. shuffled epochs: no amplification
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,bsz,epochs,z,delta", [(10_000, 100, 1, 1.2, 1e-5), (10_000, 100, 3, 1.2, 1e-5),
                                                  (64, 8, 2, 2.0, 1e-3)])
def test_dpsgd_shuffle_spend_is_composed_gaussians(n, bsz, epochs, z, delta):
    """Fails on the former code (sampling without replacement: 5.69 instead of 8.00 at one epoch of
    n = 10^4, B = 100, z = 1.2, delta = 1e-5). A record is in one batch per epoch; replace-one
    moves a clipped sum by 2C against noise std zC, so the run is one Gaussian with
    mu = 2 sqrt(epochs) / z, and its exact epsilon is the spend."""
    sp = dpsgd_spend_kw(z, n=n, batch_size=bsz, epochs=epochs, delta=delta, sampling="shuffle")
    mu = 2 * math.sqrt(epochs) / z
    assert sp.epsilon == pytest.approx(_gaussian_eps(mu, delta), rel=1e-8)
    assert _gaussian_delta(mu, sp.epsilon) <= delta * (1 + 1e-9)
    assert sp.relation == "replace_one" and sp.delta == delta and sp.accountant == "exact"
    assert sp.event == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z / 2), epochs)
    # dp-accounting's PLD of the recorded event (read with its default relation) agrees; RDP bounds it
    assert A.epsilon_of_event(sp.event, delta, accountant="pld") == pytest.approx(sp.epsilon, rel=1e-6)
    assert A.epsilon_of_event(sp.event, delta, accountant="rdp") >= sp.epsilon
    # steps given instead of epochs, same run
    steps = epochs * (n // bsz)
    assert dpsgd_spend_kw(z, n=n, batch_size=bsz, steps=steps, delta=delta, sampling="shuffle").epsilon == sp.epsilon


def test_dpsgd_shuffle_change_in_numbers():
    """Record of the change at a typical size: the former (unproven) rule claimed less."""
    n, bsz, z, delta = 10_000, 100, 1.2, 1e-5
    now = dpsgd_spend_kw(z, n=n, batch_size=bsz, epochs=1, delta=delta, sampling="shuffle").epsilon
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, bsz, dp_accounting.GaussianDpEvent(z / 2)),
                n // bsz)
    former = acc.get_epsilon(delta)
    assert former == pytest.approx(5.69, abs=0.01) and now == pytest.approx(8.00, abs=0.01)
    # fixed-size batches (independent each step) are sampling without replacement and keep that rule
    fs = dpsgd_spend_kw(z, n=n, batch_size=bsz, steps=n // bsz, delta=delta, sampling="fixed_size")
    assert fs.epsilon == pytest.approx(former, rel=1e-9) and fs.accountant == "rdp"


@pytest.mark.parametrize("freq", ["public", "noisy"])
def test_fermi_all_features_shuffle_is_composed_gaussians(freq):
    """Fails on the former code (sampling without replacement). All features, shuffled batches:
    per epoch one step holds the record, both updates (multipliers z_theta, z_w relative to the
    replace-one sensitivity 2C) and, once, the noisy histogram: one Gaussian with
    mu^2 = epochs (z_theta^-2 + z_w^-2) + z_count^-2. calibrate inverts privacy."""
    n, m, epochs, delta = 2000, 100, 3, 1e-5
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=epochs * (n // m), batch_size=m,
                        sampling="shuffle", group_frequencies=freq)
    zt, zw = 1.5, 3.0
    sp = _privacy(cfg, n, zt, zw, delta)
    extra = 1.0 / cfg.count_noise_multiplier if freq == "noisy" else 0.0
    mu = math.sqrt(epochs * (zt**-2 + zw**-2) + extra**2)
    assert sp.epsilon == pytest.approx(_gaussian_eps(mu, delta), rel=1e-8)
    assert sp.relation == "replace_one" and sp.unit == "example" and sp.accountant == "exact"
    assert sp.delta == delta  # no Poisson padding
    inner = dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(zt), dp_accounting.GaussianDpEvent(zw)]), epochs)
    want = inner if freq == "public" else dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(cfg.count_noise_multiplier), inner])
    assert sp.event == want
    zt2, zw2 = _calibrate_noise(cfg, n, 2.0, delta, w_relative=2.0)
    assert zw2 == pytest.approx(2 * zt2)
    assert _privacy(cfg, n, zt2, zw2, delta).epsilon == pytest.approx(2.0, rel=1e-6)
    assert _privacy(cfg, n, zt2, zw2, delta).epsilon <= 2.0 * (1 + 1e-9)


def test_fermi_fixed_size_keeps_sampling_without_replacement():
    n, m, T, delta = 2000, 100, 60, 1e-5
    cfg = F.FermiConfig(model=M.logistic(), num_groups=2, steps=T, batch_size=m, sampling="fixed_size",
                        group_frequencies="public")
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, m, dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(1.5), dp_accounting.GaussianDpEvent(3.0)])), T)
    assert _privacy(cfg, n, 1.5, 3.0, delta).epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-9)


# ------------------------------------------------------------------------------------------------
# 4. the dataset size behind q = batch_size / n is treated as public (stated)
# ------------------------------------------------------------------------------------------------
def test_public_dataset_size_is_stated():
    for doc in (dpsgd.spend.__doc__, smp.__doc__):
        text = " ".join(doc.split())
        assert "q = batch_size / n" in text and "public" in text and "Opacus" in text
