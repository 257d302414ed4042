"""COINPRESS (Biswas, Dong, Kamath and Ullman, NeurIPS 2020; the constants of its reference code,
``twistedcubic/coin-press``) and StratCOINPRESS (paper 003, Sec. 5), plus the reference code's
non-private "StratCOINPRESS" kept only to reproduce the stored numbers."""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy.mechanisms import gaussian_noise
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.zcdp_noise import clip_to_ball_scale, gaussian_std

from .groups import (StratifiedEstimate, _as_2d, _check_data, _common_checks, _recombine,
                     _sizes_and_weights, resolve_count_rho)

__all__ = ["REFERENCE_BETA", "REFERENCE_LOG_TERM", "gaussian_tailbound", "coinpress_clip_radius",
           "coinpress_rhos", "stratified_coinpress", "coinpress_mean", "reference_code_stratified_mean"]

REFERENCE_BETA = 0.01  # COINPRESS reference: gaussian_tailbound(d, 0.01)
REFERENCE_LOG_TERM = 3.0  # reference "3 in place of sqrt(log(2/beta))"
# the reference code's sensitivity factor: replace-one (2 C per clipped sum)
REFERENCE_FACTOR = rel.replace_factor("replace_one")


def gaussian_tailbound(d: int, beta: float = REFERENCE_BETA) -> float:
    """``sqrt(d + 2 sqrt(d log(1/beta)) + 2 log(1/beta))`` (reference ``gaussian_tailbound``;
    ``d = 1, beta = 0.01`` gives 3.808185)."""
    d = v.check_int("d", d, minimum=1)
    if not 0 < beta < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}.")
    lb = math.log(1.0 / beta)
    return math.sqrt(d + 2.0 * math.sqrt(d * lb) + 2.0 * lb)


def coinpress_clip_radius(r: Any, gamma: Any, log_term: Any = REFERENCE_LOG_TERM) -> jax.Array:
    """Projection radius of one COINPRESS step: ``min(sqrt(r^2 + 2 r log_term + gamma^2), r + gamma)``
    (reference ``multivariate_mean_step``; ``r = 3, gamma = 3.808185`` gives 6.4422)."""
    r = jnp.asarray(r, jnp.float32)
    g = jnp.asarray(gamma, jnp.float32)
    return jnp.minimum(jnp.sqrt(r * r + 2.0 * r * log_term + g * g), r + g)


def coinpress_rhos(rho: float, split: Sequence[float] = (0.25, 0.75)) -> np.ndarray:
    """Per-step budgets ``rho * split`` (the paper's ``[rho/4, 3 rho/4]``); the split must sum to 1."""
    v.check_rho(rho)
    split = np.asarray(split, np.float64)
    if split.ndim != 1 or split.size == 0 or np.any(split <= 0):
        raise ValueError(f"split must be a non-empty list of positive fractions, got {split!r}.")
    if not math.isclose(float(split.sum()), 1.0, rel_tol=1e-9):
        raise ValueError(f"split must sum to 1, got {split.tolist()} (sum {split.sum()}).")
    return float(rho) * split


def _coinpress_core(key, x, s, num_groups, center, radius, rhos, weights, relation, clip_mode,
                    beta, count_key, count_rho):
    d = x.shape[1]
    gamma = gaussian_tailbound(d, beta)
    sizes, present, w = _sizes_and_weights(count_key, s, num_groups, weights, count_rho, relation)
    den = jnp.maximum(sizes, 1.0)
    c0 = jnp.broadcast_to(jnp.asarray(center, jnp.float32), (num_groups, d))
    r0 = jnp.broadcast_to(jnp.asarray(radius, jnp.float32), (num_groups,))
    factor = rel.replace_factor(relation)
    t = rhos.shape[0]
    keys = jax.random.split(key, t)

    def step(carry, inp):
        xs, c, r = carry
        k_t, rho_t = inp
        C = coinpress_clip_radius(r, gamma)
        diff = xs - c[s]
        norm = jnp.sqrt(jnp.sum(diff * diff, axis=1))
        Ci = C[s]
        scale = clip_to_ball_scale(norm, Ci)
        proj = diff * scale[:, None]
        sums = jax.ops.segment_sum(proj, s, num_segments=num_groups)
        sigma_sum = gaussian_std(factor * C, rho_t)  # noise std on the centred clipped sum
        noise = gaussian_noise(k_t, sums.shape, sigma_sum[:, None])
        c_new = jnp.where(present[:, None], c + (sums + noise) / den[:, None], c)
        sigma_mean = sigma_sum / den  # the reference's sigma = (2C/n)/sqrt(2 rho)
        r_new = jnp.where(present, jnp.sqrt(1.0 / den + sigma_mean ** 2) * gamma, r)
        xs_new = c[s] + proj if clip_mode == "cumulative" else xs
        return (xs_new, c_new, r_new), None

    (_, c, r), _ = jax.lax.scan(step, (x, c0, r0), (keys, rhos))
    return StratifiedEstimate(_recombine(c, w), c, w, sizes, present, r)


def _check_coinpress(center, radius, rhos, clip_mode, beta):
    v.check_finite("center", center)
    v.check_positive("radius", radius)
    if np.ndim(rhos) != 1 or np.shape(rhos)[0] < 1:
        raise ValueError(f"rhos must be a 1-D array of per-step budgets (t >= 1), got shape {np.shape(rhos)}.")
    v.check_rho(rhos, "rhos")
    v.check_choice("clip_mode", clip_mode, ("fresh", "cumulative"))
    if not 0 < float(beta) < 1:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}.")


@full_precision
def stratified_coinpress(key: jax.Array, x: Any, s: Any, num_groups: int, *, center: Any = 0.0,
                         radius: Any = 3.0, rhos: Any = (0.125, 0.375), weights: Any = None,
                         relation: str = "replace_one_within_group", clip_mode: str = "fresh",
                         beta: float = REFERENCE_BETA, count_rho: Any = None) -> StratifiedEstimate:
    """StratCOINPRESS (paper Sec. 5): COINPRESS on every group at once with the full budget.

    Each of the ``t = len(rhos)`` steps, for every group ``g`` (segment sums, ``num_groups`` static):
    project rows onto ``B(c_g, C_g)``, ``C_g = min(sqrt(r_g^2 + 6 r_g + gamma^2), r_g + gamma)``,
    ``gamma = gaussian_tailbound(d, beta)``; ``c_g <- c_g + (sum clip(x - c_g) + N(0, sigma^2 I)) / n_g``
    with ``sigma = Delta C_g / sqrt(2 rho_t)`` (``Delta = 2`` replace-one, the reference; ``1``
    add/remove); ``r_g <- gamma sqrt(1/n_g + (sigma/n_g)^2)``. Returns the groups' final centres
    and their recombination ``sum_g w_g c_g`` (eq. 3) with ``w`` = size fractions
    (StratCOINPRESS) or public ``weights`` (Pub-StratCOINPRESS).

    ``n_g``: the exact size under replace-one within a stratum (the reference code); under
    add/remove and general replace-one (a record may move between strata) the noisy count
    ``n~_g = n_g + N(0, 1/(2 count_rho))`` in every step's update, radius and weight and in the
    returned ``sizes`` (departure from the reference's exact ``n``, which differs between
    add/remove neighbours); ``count_rho`` defaults to ``DEFAULT_COUNT_FRACTION * sum(rhos)``.

    ``clip_mode="fresh"`` (default) projects the raw data at every step; ``"cumulative"`` projects
    the previous step's projected rows (the reference modifies ``X`` in place).

    Privacy: replace-one within a stratum (default; public sizes): ``sum(rhos)``-zCDP per group and
    overall (parallel composition over disjoint strata); a record moving to another stratum is not
    covered (the exact sizes differ). Add/remove, replace-one, or ``count_rho`` given:
    ``(sum(rhos) + count_rho)``-zCDP (a move between strata changes two groups' centred clipped
    sums by at most ``C_g`` each, within the ``2 C_g`` each is noised for). :func:`~.estimator.spend` (``method="coinpress"``) reports either.

    Lower level: use :func:`~dpfair_jax.algorithms.mean_estimation.fit` (records no spend).
    """
    relation = _common_checks(key, x, s, num_groups, weights, relation, count_rho)
    _check_coinpress(center, radius, rhos, clip_mode, beta)
    rhos = jnp.asarray(rhos, jnp.float32)
    count_rho = resolve_count_rho(relation, jnp.sum(rhos), count_rho)
    return _coinpress_run(key, x, s, num_groups, center=center, radius=radius, rhos=rhos,
                          weights=weights, relation=relation, clip_mode=clip_mode, beta=beta,
                          count_rho=count_rho)


def _coinpress_run(key, x, s, num_groups, *, center, radius, rhos, weights, relation, clip_mode,
                   beta, count_rho):
    """The estimator after validation; ``count_rho=None`` uses the exact sizes (public sizes)."""
    x2, _ = _as_2d(x)
    kn, kc = jax.random.split(key)
    return _coinpress_core(kn, x2, jnp.asarray(s, jnp.int32), num_groups, center, radius,
                           jnp.asarray(rhos, jnp.float32), weights, relation, clip_mode, beta,
                           kc, count_rho)


@full_precision
def coinpress_mean(key: jax.Array, x: Any, *, center: Any = 0.0, radius: Any = 3.0,
                   rhos: Any = (0.125, 0.375), relation: str = "replace_one_within_group",
                   clip_mode: str = "fresh", beta: float = REFERENCE_BETA,
                   count_rho: Any = None) -> jax.Array:
    """COINPRESS (Biswas et al. 2020, ``multivariate_mean_iterative``): ``[d]`` (scalar for 1-D ``x``).

    The one-group case of :func:`stratified_coinpress`; defaults are the paper's: prior ball
    ``B(0, 3)``, two steps with ``rho = 0.5`` split ``[1/4, 3/4]``. Under add/remove ``n`` is the
    noisy count (see :func:`stratified_coinpress`).

    Privacy: replace-one within the one group (``n`` public; the default): ``sum(rhos)``-zCDP;
    add/remove or general replace-one (noisy ``n``): ``(sum(rhos) +
    count_rho)``-zCDP, ``count_rho`` defaulting to ``DEFAULT_COUNT_FRACTION * sum(rhos)``.

    Lower level: use :func:`~dpfair_jax.algorithms.mean_estimation.fit` (records no spend).
    """
    v.check_threefry_key(key)
    _check_data(x)
    n = np.shape(x)[0]
    out = stratified_coinpress(key, x, jnp.zeros((n,), jnp.int32), 1, center=center, radius=radius,
                               rhos=rhos, relation=relation, clip_mode=clip_mode, beta=beta,
                               count_rho=count_rho)
    return out.estimate[0] if np.ndim(x) == 1 else out.estimate


# ------------------------------------------------------------------------------------------------
# the reference code's (non-private) StratCOINPRESS, for reproduction only
# ------------------------------------------------------------------------------------------------
def reference_code_stratified_mean(key: jax.Array, x: Any, s: Any, num_groups: int, *,
                                   center: Any = 0.0, radius: Any = 3.0,
                                   rhos: Any = (0.125, 0.375), beta: float = REFERENCE_BETA,
                                   mask: Any = None) -> jax.Array:
    """What the paper's public code stored as "StratCOINPRESS" (NOT differentially private).

    ``coinpress_results.ipynb`` first runs global COINPRESS, which clips ``X`` in place, then
    appends the **non-private** group means of that clipped data (the private group estimate is
    computed but unused), recombined by exact sizes. Returned only to reproduce the stored
    numbers; never report it as a private result.

    ``mask [n]`` (optional) excludes rows (padding in a vectorized study).

    Privacy: none (the group means are exact).
    """
    v.check_threefry_key(key)
    _check_data(x, s, num_groups)
    _check_coinpress(center, radius, rhos, "cumulative", beta)
    x2, _ = _as_2d(x)
    s = jnp.asarray(s, jnp.int32)
    d = x2.shape[1]
    gamma = gaussian_tailbound(d, beta)
    c = jnp.broadcast_to(jnp.asarray(center, jnp.float32), (d,))
    r = jnp.asarray(radius, jnp.float32)
    xs = x2
    m = jnp.ones(x2.shape[0], jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    for t, k_t in enumerate(jax.random.split(key, np.shape(rhos)[0])):
        C = coinpress_clip_radius(r, gamma)
        diff = xs - c
        norm = jnp.sqrt(jnp.sum(diff * diff, axis=1))
        xs = c + diff * clip_to_ball_scale(norm, C)[:, None]
        sigma = gaussian_std(REFERENCE_FACTOR * C / n, jnp.asarray(rhos, jnp.float32)[t])
        c = (m @ xs) / n + gaussian_noise(k_t, (d,), sigma)
        r = jnp.sqrt(1.0 / n + sigma ** 2) * gamma
    counts = jax.ops.segment_sum(m, s, num_segments=num_groups)
    sums = jax.ops.segment_sum(xs * m[:, None], s, num_segments=num_groups)
    gm = sums / jnp.maximum(counts, 1.0)[:, None]
    out = (counts / n) @ gm
    return out[0] if np.ndim(x) == 1 else out
