"""Stage 1 of budget tailoring (paper 000, Algorithm 1): private per-group standard errors.

Privacy: ``tau``-zCDP (Lemma 4.1) under ``Config.relation``; see :func:`stage1_noise_stds`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy.bounding import clip_to_interval, norm_clip_divisor
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.zcdp_noise import gaussian_std

from .core import Config, Hyperparams, _check_inputs, _sens, _standalone
from .tables import ClippedSumTable, table_group_sums

__all__ = ["Stage1Release", "stage1_noise_stds", "stage1_release", "stage1_standard_errors"]


def _min_eig_and_solve(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Smallest eigenvalue of the symmetric ``a`` and ``a^-1 b``; closed forms for P <= 2."""
    p = a.shape[0]
    if p == 1:
        return a[0, 0], b / a[0, 0]
    if p == 2:
        h, c, o = 0.5 * (a[0, 0] + a[1, 1]), 0.5 * (a[0, 0] - a[1, 1]), a[0, 1]
        lam = h - jnp.sqrt(c * c + o * o)
        det = a[0, 0] * a[1, 1] - o * o
        sol = jnp.stack([a[1, 1] * b[0] - o * b[1], a[0, 0] * b[1] - o * b[0]]) / det
        return lam, sol
    return jnp.linalg.eigvalsh(a)[0], jnp.linalg.solve(a, b)


class Stage1Release(NamedTuple):
    """The noisy releases of Algorithm 1 (lines 8, 9 and 17) and the pooled fit computed from them.

    ``xtx [P, P]``: ``X^T X`` plus symmetric Gaussian noise (upper triangle i.i.d., mirrored);
    ``xty [P]``: ``X^T y`` plus noise; ``residual_sums [K]``: per group the clipped squared
    residual sum at ``beta`` plus noise; ``beta [P]``: ``(noisy X^T X)^-1 noisy X^T y`` (post-
    processing; non-finite when the noisy matrix is singular); ``lam_min``: the smallest eigenvalue
    of the noisy ``X^T X`` (line 11)."""

    xtx: jax.Array
    xty: jax.Array
    residual_sums: jax.Array
    beta: jax.Array
    lam_min: jax.Array


def stage1_noise_stds(tau: Any, num_groups: int, hparams: Hyperparams, config: Config = Config()
                      ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Noise stds of Algorithm 1's releases: ``(std_xx, std_xy, std_res)``.

    ``tau_k = tau / (K + 1)`` (line 7); ``X^T X`` and ``X^T y`` get ``tau_k / 2`` each (lines
    8-9, Lemma C.1), so ``std = sens / sqrt(tau_k)`` with ``sens_xx = U_x^2`` (add/remove) or
    ``sqrt(2) U_x^2`` (replace-one; Frobenius norm of ``x x^T - x' x'^T``) and ``sens_xy = U_x U_y``
    or ``2 U_x U_y``; each group's clipped residual sum gets ``tau_k`` (line 17), ``std_res = sens
    / sqrt(2 tau_k)`` with ``sens = Delta^2`` (``stage1_clip="delta_sq"``, residuals in ``[0,
    Delta^2]``) or ``max(Delta, Delta^2)`` (``"paper"``, residuals in ``[0, Delta]``: the true
    sensitivity ``Delta`` when ``Delta < 1``, the paper's ``Delta^2`` otherwise), the same under
    both relations. ``tau`` may be traced.

    Privacy: the three releases together are ``tau``-zCDP (Lemma 4.1) under ``config.relation``.
    """
    sens = _sens(config.relation)
    tau_k = jnp.asarray(tau) / (num_groups + 1)
    ux, uy, clip = hparams.stats_bound_x, hparams.stats_bound_y, hparams.clip
    std_xx = gaussian_std(sens.gram * ux**2, tau_k / 2.0)  # tau_k / 2 each (lines 8-9)
    std_xy = gaussian_std(sens.vector * ux * uy, tau_k / 2.0)
    bound = clip**2 if config.stage1_clip == "delta_sq" else jnp.maximum(clip, clip**2)
    std_res = gaussian_std(sens.bounded * bound, tau_k)
    return std_xx, std_xy, std_res


def _stage1_release(z_all, xs, y, onehot, xnorm, tau, hp: Hyperparams, cfg: Config,
                    table: ClippedSumTable | None = None) -> Stage1Release:
    """Algorithm 1's noisy releases on structure-of-arrays inputs (see :class:`Stage1Release`).

    With a :class:`ClippedSumTable` valid for every theta (``domain=None``; one feature) and
    ``stage1_clip="delta_sq"`` the clipped residual sums ``sum_k min(r_i^2, Delta^2)`` are the
    table's loss sums at ``beta``; a table restricted to the descent's box cannot serve ``beta``
    (unbounded), and the sums are then taken over the examples."""
    p = xs.shape[0]
    k_groups = onehot.shape[1]
    std_xx, std_xy, std_res = stage1_noise_stds(tau, k_groups, hp, cfg)
    # Lemma C.1 on bounded rows: clip ||x|| <= U_x, |y| <= U_y.
    a = 1.0 / norm_clip_divisor(xnorm, hp.stats_bound_x, p)  # xnorm sums p squares
    xa = xs * a
    yc = clip_to_interval(y, -hp.stats_bound_y, hp.stats_bound_y)
    w = jnp.sum(onehot, axis=1)  # row weights (mask)
    xtx = (xa * w) @ xa.T
    xty = (xa * w) @ yc
    z = z_all[: p * p].reshape(p, p)
    z = jnp.triu(z) + jnp.triu(z, 1).T  # symmetric: upper triangle i.i.d., mirrored
    xtx_n = xtx + std_xx * z
    xty_n = xty + std_xy * z_all[p * p: p * p + p]
    lam_min, beta = _min_eig_and_solve(xtx_n, xty_n)  # lines 11 and 15
    if table is not None and table.domain is None and cfg.stage1_clip == "delta_sq":
        clean = table_group_sums(table, jnp.where(jnp.isfinite(beta[0]), beta[0], 0.0))[1]
        clean = jnp.where(jnp.isfinite(beta[0]), clean, jnp.inf)
    else:
        r2 = (beta @ xs - y) ** 2
        upper = hp.clip if cfg.stage1_clip == "paper" else hp.clip**2
        clean = clip_to_interval(r2, 0.0, upper) @ onehot
    s_sum = clean + std_res * z_all[p * p + p:]  # line 17
    return Stage1Release(xtx_n, xty_n, s_sum, beta, lam_min)


def _stage1(z_all, xs, y, onehot, den, xnorm, tau, hp: Hyperparams, cfg: Config,
            table: ClippedSumTable | None = None):
    """Algorithm 1 on structure-of-arrays inputs. Returns (se [K], fallback, beta [P]).

    ``den [K]``: the group sizes of line 21 (public sizes, or the noisy counts under add/remove);
    everything after the releases of :func:`_stage1_release` is post-processing."""
    p = xs.shape[0]
    k_groups = onehot.shape[1]
    rel = _stage1_release(z_all, xs, y, onehot, xnorm, tau, hp, cfg, table)
    s_sum, beta = rel.residual_sums, rel.beta
    denom = den - p if cfg.se_denominator == "n_minus_d" else den
    se = jnp.sqrt(jnp.maximum(s_sum, 0.0) / jnp.maximum(denom, 1.0))  # line 21
    se = se / jnp.sqrt(jnp.sum(se**2))  # line 23
    fallback = (rel.lam_min <= 0) | jnp.any(s_sum <= 0) | ~jnp.all(jnp.isfinite(se))  # l. 11, 18
    equal = jnp.full((k_groups,), 1.0 / math.sqrt(k_groups), xs.dtype)
    se = jnp.where(fallback, equal, se)
    beta = jnp.where(jnp.all(jnp.isfinite(beta)), beta, 0.0)
    return se, fallback, beta


@full_precision
def stage1_release(key: jax.Array, data: Dataset, hparams: Hyperparams,
                   config: Config = Config()) -> Stage1Release:
    """Lower level: use :func:`~.algorithm.fit` (records no spend). Algorithm 1's noisy releases
    (lines 8, 9, 17) with ``tau = tau_fraction * rho`` (of the
    budget left after the counts under add/remove): noisy ``X^T X``, ``X^T y``, per-group clipped
    residual sums, and the pooled fit computed from them (:class:`Stage1Release`; the noise stds
    are :func:`stage1_noise_stds`). Uses the same draws as :func:`stage1_standard_errors`.

    Privacy: ``tau``-zCDP (Lemma 4.1/B.1) under ``config.relation``.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, z1, _, tau, _, _ = _standalone(key, data, hparams, config, config.steps)
    return _stage1_release(z1, xs, y, onehot, xnorm, tau, hparams, config)


@full_precision
def stage1_standard_errors(key: jax.Array, data: Dataset, hparams: Hyperparams,
                           config: Config = Config()) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Lower level: use :func:`~.algorithm.fit` (records no spend). Algorithm 1: ``tau``-zCDP
    per-group standard errors, ``tau = tau_fraction * rho`` (of
    ``(1 - count_fraction) rho`` under add/remove).

    Noisy ``X^T X`` (symmetric noise) and ``X^T y`` with ``tau_k/2`` each (Lemma C.1), ``tau_k =
    tau/(K+1)``; the pooled fit ``beta = (X^T X)^-1 X^T y``; per group the clipped residual sum plus
    ``N(0, std_res^2)`` noise (:func:`stage1_noise_stds`); ``s_k = sqrt(S_k/n_k)`` normalised to
    ``sum s_k^2 = 1``, with ``n_k`` the public size (replace-one) or the noisy count (add/remove).
    The fallbacks (``lambda_min <= 0`` or some ``S_k <= 0``: return ``1/sqrt(K)``) are
    ``jnp.where``. Returns ``(se [K], fallback, beta [P])``.

    Privacy: ``tau``-zCDP (Lemma 4.1/B.1) under ``config.relation``; under add/remove plus
    ``count_fraction * rho`` for the noisy counts.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, z1, _, tau, _, den = _standalone(key, data, hparams, config,
                                                           config.steps)
    return _stage1(z1, xs, y, onehot, den, xnorm, tau, hparams, config)
