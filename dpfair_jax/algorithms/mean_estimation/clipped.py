"""Clipped Laplace and Gaussian means, global and stratified (paper 003, eqs. 1-3; notes A1-A3)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v
from dpfair_jax.privacy import relations as rel
from dpfair_jax.privacy.mechanisms import gaussian_noise, laplace_noise
from dpfair_jax.privacy.bounding import clip_to_interval
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.zcdp_noise import clip_to_ball_scale, gaussian_std, laplace_scale

from .groups import (StratifiedEstimate, _as_2d, _check_data, _check_gamma, _common_checks,
                     _laplace_budget, _recombine, _sizes_and_weights, resolve_count_rho)

__all__ = ["clip_halfwidth", "laplace_mean", "gaussian_mean", "stratified_laplace_mean",
           "stratified_gaussian_mean"]


def clip_halfwidth(n: Any, R: Any, gamma: Any) -> jax.Array:
    """``R + s`` with ``s = sqrt(log(n / gamma))`` (paper Sec. 4; ``s = sqrt(log n/gamma)`` read as
    ``log(n/gamma)``, consistent with Prop. 8's ``log(n/(k gamma))``). ``n`` may be an array."""
    n = jnp.maximum(jnp.asarray(n, jnp.float32), 1.0)
    return jnp.asarray(R, jnp.float32) + jnp.sqrt(jnp.log(n / jnp.asarray(gamma, jnp.float32)))


def _interval(n, R, gamma, variant):
    hw = clip_halfwidth(n, R, gamma)
    if variant == "paper":
        # As printed: [R - s, R + s] (width 2s, though the noise uses the width 2R + 2s).
        s_ = hw - jnp.asarray(R, jnp.float32)
        return jnp.asarray(R, jnp.float32) - s_, hw, hw
    return -hw, hw, hw


def _laplace_core(key, x, s, num_groups, R, gamma, epsilon, weights, relation, variant,
                  count_key, count_rho):
    sizes, present, w = _sizes_and_weights(count_key, s, num_groups, weights, count_rho, relation)
    den = jnp.maximum(sizes, 1.0)
    lo, hi, hw = _interval(den, R, gamma, variant)  # per group [k]
    xc = clip_to_interval(x, lo[s][:, None], hi[s][:, None])
    sums = jax.ops.segment_sum(xc, s, num_segments=num_groups)
    d = x.shape[1]
    # L1 sensitivity of the clipped sum: d * width (replace-one) or d * max|value| (add/remove).
    sens = d * rel.replace_factor(relation) * hw
    scale = laplace_scale(sens, jnp.asarray(epsilon, jnp.float32))
    noise = laplace_noise(key, sums.shape, scale[:, None])
    means = jnp.where(present[:, None], (sums + noise) / den[:, None], 0.0)
    return StratifiedEstimate(_recombine(means, w), means, w, sizes, present, hw)



@full_precision
def stratified_laplace_mean(key: jax.Array, x: Any, s: Any, num_groups: int, *, R: Any,
                            gamma: Any, epsilon: Any, weights: Any = None,
                            relation: str = "replace_one_within_group", variant: str = "corrected",
                            count_rho: Any = None) -> StratifiedEstimate:
    """Stratified clipped Laplace mean (paper eqs. 2-3): per group, clip to ``[-(R+s_g), R+s_g]``
    with ``s_g = sqrt(log(n_g / gamma))``, sum, add ``Lap(d Delta_g / epsilon)`` with ``Delta_g = 2(R+s_g)``
    (replace-one) or ``R+s_g`` (add/remove), divide by ``n_g``; recombine ``sum_g w_g mu_g``.

    ``n_g`` is the exact size under replace-one within a stratum (eq. 2 as printed). Under
    add/remove and general replace-one (``count_rho`` by default, :func:`resolve_count_rho`) it is the
    noisy count ``n~_g = n_g + N(0, 1/(2 count_rho))`` (departure from eq. 2, whose exact ``|G_i|``
    differs between neighbours), used for ``s_g``, the Laplace scale, the denominator, the weights
    and the returned ``sizes``; ``count_rho`` defaults to ``DEFAULT_COUNT_FRACTION * epsilon^2 / 2``.
    With exact sizes the recombined noise is ``sum_g Lap(2(R+s_g)/(n eps))`` (the size cancels;
    variance ``8 sum_g (R+s_g)^2 / (n eps)^2``, :mod:`~dpfair_jax.analysis.stratification_theory`).
    ``variant="paper"`` clips to the interval as printed, ``[R - s, R + s]``.

    Privacy: replace-one within a stratum (public sizes), no ``count_rho``: ``epsilon``-DP (pure)
    per group with the full budget, so ``epsilon``-DP overall by parallel composition (Prop. 7).
    Add/remove, replace-one (a record may move between strata: two groups' sums change, each by at
    most half the noise's sensitivity), or ``count_rho`` given: ``(epsilon^2 / 2 +
    count_rho)``-zCDP (the Laplace releases as ``epsilon^2/2``-zCDP, plus the Gaussian counts);
    :func:`~.estimator.spend` gives the spend (``method="laplace"``).

    Lower level: use :func:`~dpfair_jax.algorithms.mean_estimation.fit` (records no spend).
    """
    relation = _common_checks(key, x, s, num_groups, weights, relation, count_rho)
    v.check_epsilon(epsilon)
    v.check_positive("R", R, allow_zero=True)
    _check_gamma(gamma)
    v.check_choice("variant", variant, ("corrected", "paper"))
    count_rho = resolve_count_rho(relation, _laplace_budget(epsilon), count_rho)
    return _laplace_run(key, x, s, num_groups, R=R, gamma=gamma, epsilon=epsilon, weights=weights,
                        relation=relation, variant=variant, count_rho=count_rho)


def _laplace_run(key, x, s, num_groups, *, R, gamma, epsilon, weights, relation, variant, count_rho):
    """The estimator after validation; ``count_rho=None`` uses the exact sizes (public sizes)."""
    x2, _ = _as_2d(x)
    kn, kc = jax.random.split(key)
    return _laplace_core(kn, x2, jnp.asarray(s, jnp.int32), num_groups, R, gamma, epsilon, weights,
                         relation, variant, kc, count_rho)


@full_precision
def laplace_mean(key: jax.Array, x: Any, *, R: Any, gamma: Any, epsilon: Any,
                 relation: str = "replace_one_within_group", variant: str = "corrected",
                 count_rho: Any = None) -> jax.Array:
    """Global clipped Laplace mean ``p_hat`` (paper Sec. 4, eq. 1): ``[d]`` (or a scalar for 1-D ``x``).

    ``sum(clip(x, [-(R+s), R+s])) / n + Lap(d Delta / (n eps))``, ``s = sqrt(log(n/gamma))``,
    ``Delta = 2(R+s)`` (replace-one; the paper) or ``R+s`` (add/remove). Under add/remove ``n`` is
    the noisy count ``n + N(0, 1/(2 count_rho))`` everywhere it enters (eq. 1 uses the exact ``n``,
    which differs between neighbours); see :func:`stratified_laplace_mean`.

    Privacy: replace-one within the one group (``n`` public; the default): ``epsilon``-DP. Add/remove
    or general replace-one (noisy ``n``): ``(epsilon^2/2 +
    count_rho)``-zCDP, ``count_rho`` defaulting to ``DEFAULT_COUNT_FRACTION * epsilon^2 / 2``
    (:func:`~.estimator.spend`).

    Lower level: use :func:`~dpfair_jax.algorithms.mean_estimation.fit` (records no spend).
    """
    v.check_threefry_key(key)
    _check_data(x)
    n = np.shape(x)[0]
    out = stratified_laplace_mean(key, x, jnp.zeros((n,), jnp.int32), 1, R=R, gamma=gamma,
                                  epsilon=epsilon, relation=relation, variant=variant,
                                  count_rho=count_rho)
    return out.estimate[0] if np.ndim(x) == 1 else out.estimate


def _gaussian_core(key, x, s, num_groups, center, C, rho, weights, relation, count_key, count_rho):
    sizes, present, w = _sizes_and_weights(count_key, s, num_groups, weights, count_rho, relation)
    den = jnp.maximum(sizes, 1.0)
    c = jnp.broadcast_to(jnp.asarray(center, jnp.float32), (num_groups, x.shape[1]))
    Cg = jnp.broadcast_to(jnp.asarray(C, jnp.float32), (num_groups,))
    sums = _centered_clipped_sums(x, s, num_groups, c, Cg)
    sigma = gaussian_std(rel.replace_factor(relation) * Cg, jnp.asarray(rho, jnp.float32))
    noisy = sums + gaussian_noise(key, sums.shape, sigma[:, None])
    means = jnp.where(present[:, None], c + noisy / den[:, None], c)
    return StratifiedEstimate(_recombine(means, w), means, w, sizes, present, Cg)


def _centered_clipped_sums(x, s, num_groups, c, C):
    """``sum_{i in g} clip_{C_g}(x_i - c_g)`` (L2 projection onto the ball), shape ``[k, d]``."""
    diff = x - c[s]
    norm = jnp.sqrt(jnp.sum(diff * diff, axis=1))
    Ci = C[s]
    scale = clip_to_ball_scale(norm, Ci)
    return jax.ops.segment_sum(diff * scale[:, None], s, num_segments=num_groups)


@full_precision
def stratified_gaussian_mean(key: jax.Array, x: Any, s: Any, num_groups: int, *, center: Any,
                             clip: Any, rho: Any, weights: Any = None,
                             relation: str = "replace_one_within_group", count_rho: Any = None
                             ) -> StratifiedEstimate:
    """Stratified Gaussian mean: per group ``c + (sum clip_C(x - c) + N(0, sigma^2 I)) / n_g`` with
    ``sigma = Delta / sqrt(2 rho)``, ``Delta = 2C`` (replace-one) or ``C`` (add/remove); recombined
    with weights ``w`` (notes A3: with exact sizes the recombined noise variance is
    ``sum_g (Delta_g/n)^2 / (2 rho)``, ``k`` times the global one for equal clips).

    ``n_g`` is the exact size under replace-one within a stratum, the noisy count ``n_g + N(0, 1/(2
    count_rho))`` under add/remove and general replace-one (denominator, weights and returned ``sizes``; ``count_rho`` defaults to
    ``DEFAULT_COUNT_FRACTION * rho``). ``clip`` is a scalar or ``[k]`` (traced); ``center`` is
    ``[d]`` or ``[k, d]``.

    Privacy: replace-one within a stratum (public sizes): ``rho``-zCDP per group and overall
    (parallel composition). Add/remove, replace-one across strata, or ``count_rho`` given: ``(rho +
    count_rho)``-zCDP (:func:`~.estimator.spend`, ``method="gaussian"``).

    Lower level: use :func:`~dpfair_jax.algorithms.mean_estimation.fit` (records no spend).
    """
    relation = _common_checks(key, x, s, num_groups, weights, relation, count_rho)
    v.check_rho(rho)
    v.check_clip_norm(clip, "clip")
    v.check_finite("center", center)
    count_rho = resolve_count_rho(relation, jnp.asarray(rho, jnp.float32), count_rho)
    return _gaussian_run(key, x, s, num_groups, center=center, clip=clip, rho=rho, weights=weights,
                         relation=relation, count_rho=count_rho)


def _gaussian_run(key, x, s, num_groups, *, center, clip, rho, weights, relation, count_rho):
    """The estimator after validation; ``count_rho=None`` uses the exact sizes (public sizes)."""
    x2, _ = _as_2d(x)
    kn, kc = jax.random.split(key)
    return _gaussian_core(kn, x2, jnp.asarray(s, jnp.int32), num_groups, center, clip, rho, weights,
                          relation, kc, count_rho)


@full_precision
def gaussian_mean(key: jax.Array, x: Any, *, center: Any, clip: Any, rho: Any,
                  relation: str = "replace_one_within_group", count_rho: Any = None) -> jax.Array:
    """Global Gaussian mean: ``c + (sum clip_C(x - c) + N(0, sigma^2 I)) / n``, ``sigma = Delta/sqrt(2 rho)``,
    ``Delta = 2C`` (replace-one, ``n`` public) or ``C`` (add/remove, ``n`` replaced by the noisy
    count ``n + N(0, 1/(2 count_rho))``).

    Privacy: replace-one within the one group (``n`` public; the default): ``rho``-zCDP; add/remove
    or general replace-one (noisy ``n``): ``(rho + count_rho)``-zCDP, ``count_rho``
    defaulting to ``DEFAULT_COUNT_FRACTION * rho`` (:func:`~.estimator.spend`).

    Lower level: use :func:`~dpfair_jax.algorithms.mean_estimation.fit` (records no spend).
    """
    v.check_threefry_key(key)
    _check_data(x)
    n = np.shape(x)[0]
    out = stratified_gaussian_mean(key, x, jnp.zeros((n,), jnp.int32), 1, center=center, clip=clip,
                                   rho=rho, relation=relation, count_rho=count_rho)
    return out.estimate[0] if np.ndim(x) == 1 else out.estimate


