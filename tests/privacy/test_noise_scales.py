"""One noise-scale test per noise path that no other default-suite test pins.

Each test drives a noise path on zero data (or reproduces it draw for draw where the output is not
linear in the noise) and compares the measured scale with a sigma written out by hand from the
derivation, never with the code's own helper: the sample std of many draws (keys vmapped in one
call) must lie within a few standard errors ``sigma / sqrt(2 m)``, which a path adding half its
noise misses by far. ``tests/mutation/halve_noise.py`` halves each path in turn and checks that its
covering test fails (``docs/noise_paths.md``).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, special

from dpfair_jax import models as M
from dpfair_jax.algorithms import fermi as F
from dpfair_jax.algorithms.fermi import algorithm as FA
from dpfair_jax.algorithms import mean_estimation as ME
from dpfair_jax.algorithms import output_perturbation as OP
from dpfair_jax.data import make_dataset
from dpfair_jax.privacy import aggregation as agg
from dpfair_jax.privacy import mechanisms as mech


def _std_within(sample, sigma: float, n_se: float = 4.0) -> None:
    """Sample std (about the known mean 0) within ``n_se`` standard errors of ``sigma``."""
    x = np.asarray(sample, np.float64).ravel()
    sd = math.sqrt(float(np.mean(x * x)))
    se = sigma / math.sqrt(2.0 * x.size)
    assert abs(sd - sigma) < n_se * se, (sd, sigma, se)
    assert abs(float(np.mean(x))) < n_se * sigma / math.sqrt(x.size), (float(np.mean(x)), sigma)


def _keys(seed: int, m: int) -> jax.Array:
    return jax.random.split(jax.random.key(seed), m)


# ------------------------------------------------------------------------------------------------
# privacy.mechanisms
# ------------------------------------------------------------------------------------------------
def test_noisy_sufficient_statistics_scales():
    """Zero rows: ``X^T X + E`` is pure symmetric noise with std ``sigma_xx`` on and above the
    diagonal, ``X^T y + e`` pure noise with std ``sigma_xy``; 3000 keys in one vmapped call."""
    d, sxx, sxy = 4, 1.3, 0.4
    x = jnp.zeros((10, d))
    y = jnp.zeros((10, 2))
    f = jax.jit(jax.vmap(lambda k: mech.noisy_sufficient_statistics(k, x, y, sigma_xx=sxx, sigma_xy=sxy)))
    xtx, xty = (np.asarray(a, np.float64) for a in f(_keys(0, 3000)))
    np.testing.assert_array_equal(xtx, np.swapaxes(xtx, 1, 2))
    iu = np.triu_indices(d)
    _std_within(xtx[:, iu[0], iu[1]], sxx)
    _std_within(xty, sxy)


@pytest.mark.parametrize("relation,factor", [("add_remove", 1.0), ("replace_one", math.sqrt(2.0))], ids=["add_remove", "replace_one"])
def test_noisy_histogram_scale(relation, factor):
    """Counts plus ``N(0, (z Delta)^2)`` per cell, ``Delta = 1`` (add/remove: one cell moves by 1)
    or ``sqrt 2`` (replace-one: one cell -1, another +1); weights select the rows counted."""
    z = 3.0
    cells = jnp.asarray(np.arange(60) % 4, jnp.int32)
    w = jnp.asarray((np.arange(60) % 3 > 0).astype(np.float32))  # 2 of every 3 rows counted
    exact = np.bincount(np.arange(60) % 4, weights=(np.arange(60) % 3 > 0).astype(float), minlength=4)
    out = jax.jit(jax.vmap(lambda k: mech.noisy_histogram(k, cells, 4, noise_multiplier=z, relation=relation,
                                                          weights=w)))(_keys(1, 3000))
    _std_within(np.asarray(out, np.float64) - exact[None], z * factor)


# ------------------------------------------------------------------------------------------------
# privacy.aggregation: group-weighted noise, C != 1
# ------------------------------------------------------------------------------------------------
def test_group_weighted_private_mean_scale():
    """Zero per-example gradients, clip norm C = 3: ``sum_k w_k N(0, (z_k C)^2) / n_k``. With
    ``w = e_k`` the output std is ``z_k C / n_k`` (each group's own scale; a dropped ``C`` is off by
    3x); with mixed weights ``sqrt(sum_k (w_k z_k C / n_k)^2)``, through the optax form too."""
    C, z, den = 3.0, np.array([0.5, 1.0, 2.0]), np.array([4.0, 10.0, 25.0])
    s = jnp.asarray(np.arange(12) % 3, jnp.int32)
    zeros = {"g": jnp.zeros((12, 500)), "b": jnp.zeros((12,))}

    def one(k, w):
        out = agg.group_weighted_private_mean(k, zeros, s, 3, clip_norm=C, noise_multipliers=jnp.asarray(z),
                                              group_weights=w, denominators=jnp.asarray(den))
        return out["g"]

    f = jax.jit(jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(None, 0)))
    out = np.asarray(f(_keys(2, 8), jnp.eye(3)), np.float64)  # [3 weights, 8 keys, 500]
    for k in range(3):
        _std_within(out[k], z[k] * C / den[k])
    w = np.array([0.2, 0.3, 0.5])
    want = math.sqrt(float(np.sum((w * z * C / den) ** 2)))
    tx = agg.group_weighted_dp_aggregate(clip_norm=C, noise_multipliers=jnp.asarray(z), group_weights=jnp.asarray(w),
                                         num_groups=3, key=0, denominators=jnp.asarray(den))

    def step(state, _):
        upd, state = tx.update(zeros, state, groups=s)
        return state, upd["g"]

    _, draws = jax.lax.scan(step, tx.init(None), None, length=8)
    _std_within(draws, want)


# ------------------------------------------------------------------------------------------------
# DP-FERMI: the noisy [labels x groups] histogram behind the default group frequencies
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("unit,factor", [("all_features", 1.0), ("sensitive_attribute", math.sqrt(2.0))],
                         ids=["all_features", "sensitive_attribute"])
def test_fermi_noisy_frequencies_histogram_scale(unit, factor):
    """The default ``group_frequencies="noisy"``: ``P_S`` from the counts of ``(y, s)`` plus
    ``N(0, (z_c Delta)^2)`` per cell, ``Delta = 1`` under the all-features unit with Poisson
    sampling (add/remove), ``sqrt 2`` under the sensitive-attribute unit (substitution), clamped at
    1. ``P`` is not linear in the noise, so it is reproduced draw for draw: the standard normal
    draws of the histogram's key, scaled by the hand-written std, against the ``P`` that
    :func:`fermi.fit` hands to its regularizer."""
    rng = np.random.default_rng(0)
    n, k, l = 200, 2, 2
    s = rng.integers(0, k, n)
    y = rng.integers(0, l, n)
    ds = make_dataset(rng.normal(size=(n, 3)), y, s, num_groups=k, num_classes=l)
    zc = 5.0
    cfg = F.FermiConfig(model=M.logistic(), num_groups=k, steps=1, batch_size=20, privacy_unit=unit,
                        count_noise_multiplier=zc)
    seen = []

    def builder(config, P):
        seen.append(np.asarray(P, np.float64))
        return FA._fermi_parts(config, P)

    key = jax.random.key(7)
    with jax.disable_jit():  # the builder reads P on the host (fit's compiled program traces it)
        F.fit(key, ds, F.FermiHparams(lam=1.0), cfg, parts_builder=builder)
    draws = np.asarray(jax.random.normal(jax.random.fold_in(key, FA._COUNT_KEY), (l * k,), jnp.float32), np.float64)
    counts = np.bincount(y * k + s, minlength=l * k).astype(np.float64) + zc * factor * draws
    counts = np.maximum(counts, 1.0).reshape(l, k)
    want = counts.sum(0) / counts.sum()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0].ravel(), want, rtol=1e-5)
    assert np.abs(want - np.bincount(s, minlength=k) / n).max() > 1e-3  # the noise is visible in P


# ------------------------------------------------------------------------------------------------
# output perturbation (paper 001)
# ------------------------------------------------------------------------------------------------
def test_output_perturbation_perturb_scale():
    """``gaussian_release(key, 0, sens, z)`` (the release of output perturbation's fit) is
    ``N(0, (z sens)^2 I)``: 400 keys x 50 coordinates, the multiplier traced."""
    from dpfair_jax.privacy.release_noise import gaussian_release

    f = jax.jit(jax.vmap(lambda k, z: gaussian_release(k, jnp.zeros(50), 0.35, z)[0], in_axes=(0, None)))
    _std_within(f(_keys(3, 400), 2.0), 0.7)


def _balle_wang_sigma(eps: float, delta: float, sens: float) -> float:
    """Smallest sigma with ``Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) <= delta``
    (Balle & Wang 2018, Thm. 8), solved here with SciPy's ``ndtr`` and ``brentq``."""
    def gap(s):
        a, b = sens / (2 * s), eps * s / sens
        return special.ndtr(a - b) - math.exp(eps) * special.ndtr(-a - b) - delta

    return optimize.brentq(gap, 1e-3 * sens, 1e3 * sens, xtol=1e-14)


def test_output_perturbation_fit_noise_by_hand():
    """``fit`` adds ``N(0, (Delta sigma)^2 I)`` with ``Delta = 2 L / (n reg)``, ``L = sqrt(R^2 + 1)``
    (logistic loss, intercept) and sigma the analytic Gaussian (Balle-Wang, solved with SciPy): the
    reported std equals it and ``theta - theta*`` over 3 keys x 401 coordinates has that std."""
    rng = np.random.default_rng(1)
    n, d, R_, reg, eps, delta = 60, 400, 1.0, 0.5, 1.0, 1e-5
    x = rng.normal(size=(n, d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.2, 1.0, (n, 1))).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.int32)
    want = _balle_wang_sigma(eps, delta, 2.0 * math.sqrt(R_**2 + 1.0) / (n * reg))
    assert OP.noise_std(eps, delta, 2.0 * math.sqrt(R_**2 + 1.0) / (n * reg)) == pytest.approx(want, rel=1e-6)
    noise = []
    cfg = OP.OutputPerturbationConfig(iters=10, delta=delta)
    hp = OP.calibrate(cfg, n, (eps, delta), hparams=OP.OutputPerturbationHparams(reg=reg, radius=R_))
    for i in range(3):
        res = OP.fit(jax.random.key(10 + i), (x, y), hp, cfg)
        assert float(res.diagnostics["std"]) == pytest.approx(want, rel=1e-6)
        noise.append(np.asarray(res.params, np.float64) - np.asarray(res.diagnostics["theta_star"], np.float64))
    _std_within(np.concatenate(noise), want)


# ------------------------------------------------------------------------------------------------
# paper 003: the reference code's global COINPRESS (reproduction only)
# ------------------------------------------------------------------------------------------------
def test_reference_code_coinpress_noise_by_hand():
    """What the paper's code stored as StratCOINPRESS: global COINPRESS clipping ``X`` in place, each
    step's centre ``mean(clipped X) + (2C/n)/sqrt(2 rho_t) z``, then the exact group means of the
    clipped data. Written as a NumPy loop with the same standard normal draws; rows far out make the
    second step's clipping (around the noisy first centre) move the output with the noise."""
    rng = np.random.default_rng(2)
    n, d, k = 40, 2, 2
    x = rng.normal(size=(n, d))
    x[:8] *= 6.0  # outliers: clipped at both steps
    s = np.arange(n) % k
    rhos = np.array([0.02, 0.06])
    key = jax.random.key(4)
    out = np.asarray(ME.reference_code_stratified_mean(key, x.astype(np.float32), s, k, center=0.0, radius=3.0,
                                                       rhos=tuple(rhos)), np.float64)
    lb = math.log(1 / 0.01)
    gamma = math.sqrt(d + 2 * math.sqrt(d * lb) + 2 * lb)
    c, r, xs = np.zeros(d), 3.0, x.astype(np.float32).astype(np.float64)
    for t, kt in enumerate(jax.random.split(key, 2)):
        C = min(math.sqrt(r * r + 2 * r * 3.0 + gamma**2), r + gamma)
        diff = xs - c
        nrm = np.linalg.norm(diff, axis=1)
        xs = c + diff * np.where(nrm > C, C / nrm, 1.0)[:, None]
        sigma = (2 * C / n) / math.sqrt(2 * rhos[t])
        c = xs.mean(0) + sigma * np.asarray(jax.random.normal(kt, (d,), jnp.float32), np.float64)
        r = math.sqrt(1 / n + sigma**2) * gamma
    gm = np.stack([xs[s == g].mean(0) for g in range(k)])
    want = (np.bincount(s, minlength=k) / n) @ gm
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# accounting: the classical calibration (used for the Gaussian lower-bound study of paper 002)
# ------------------------------------------------------------------------------------------------
def test_classical_gaussian_sigma_closed_form():
    """Dwork & Roth Thm. A.1: ``sigma = sqrt(2 ln(1.25/delta)) Delta / eps`` (eps < 1); at eps = 0.5,
    delta = 1e-5, Delta = 2: ``sqrt(2 ln 125000) * 4 = 19.379...``."""
    from dpfair_jax.privacy import accounting as acc

    assert acc.classical_gaussian_sigma(0.5, 1e-5, sensitivity=2.0) == pytest.approx(
        4.0 * math.sqrt(2.0 * math.log(125000.0)), rel=1e-12)
    assert acc.classical_gaussian_sigma(0.5, 1e-5, sensitivity=2.0) == pytest.approx(19.3792, abs=1e-4)
