"""Stage 2 of budget tailoring (paper 000, Algorithms 2 and 3, and the pooled DPNoSE baseline):
projected noisy gradient descent on per-group clipped sums with group-weighted Gaussian noise.

Privacy: ``mu``-zCDP (Lemmas B.2, B.3) under ``Config.relation`` for an allocation with
``sum_k s_k^2 = 1``; see :func:`group_noise_stds`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpfair_jax.data.dataset import Dataset
from dpfair_jax.privacy.bounding import clip_to_interval, clip_to_norm
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy.zcdp_noise import gaussian_std_per_step, gaussian_stds_at_rho

from .core import (Config, Hyperparams, _check_inputs, _dloss_and_loss, _resolve_f, _resolve_g, _sens,
                   _standalone)
from .tables import ClippedSumTable, table_group_sums

__all__ = ["group_noise_stds", "noisy_group_release", "stage2_descent"]


def group_noise_stds(se: Any, mu: Any, steps: int, clip: Any, *, fairness: bool = False,
                     relation: Any = "replace_one_within_group") -> tuple[jax.Array, jax.Array]:
    """Per-group Gaussian noise stds on the clipped gradient and loss sums (Algorithms 2 and 3).

    Algorithm 3 gives group k the budget ``mu_T = mu s_k^2 / T`` per iteration, so the gradient
    noise std is ``sens_g / sqrt(2 mu_T) = sens_g sqrt(T / (2 mu s_k^2))``. Algorithm 2 halves it
    between gradient and loss (``mu_T = mu s_k^2 / (2T)`` each): std ``sens_g sqrt(T/(mu s_k^2))``
    and ``sens_l sqrt(T/(mu s_k^2))``. Sensitivities of a group's clipped sums: ``sens_g = 2
    Delta`` (replace-one within the group) or ``Delta`` (add/remove); ``sens_l = Delta^2`` under
    both (losses clipped to ``[0, Delta^2]``). Returns (grad_std, loss_std).

    Privacy: per iteration these are ``sum_k mu s_k^2 / T = mu / T``-zCDP (Gaussian mechanism,
    Bun & Steinke Lemma 2.5) under ``relation``, so ``mu``-zCDP over T iterations when
    ``sum_k s_k^2 = 1``.
    """
    se = jnp.asarray(se)
    sens = _sens(relation)  # refuses an unknown relation (and the retired "swap") by name
    share = jnp.asarray(mu) * se**2 / steps  # mu_T per group, both halves together
    per_release = share / 2.0 if fairness else share
    return gaussian_stds_at_rho(per_release, sens.vector * clip, sens.bounded * clip**2)


def _noise_stds(se, mu, hp: Hyperparams, cfg: Config, dtype):
    """(grad_std, loss_std) on the clipped *sums*, [K] ([1] for pooled); zero when not private."""
    if cfg.method == "pooled":
        # DPNoSE (standard DP-GD): budget mu/T per iteration on the pooled clipped sum, whose
        # sensitivity is that of one clipped vector (2 Delta under replace-one, Delta add/remove).
        sens = _sens(cfg.relation).vector
        grad_std = gaussian_std_per_step(sens * hp.clip, mu, cfg.steps) * jnp.ones((1,), dtype)
        loss_std = jnp.zeros((1,), dtype)
    else:
        grad_std, loss_std = group_noise_stds(se, mu, cfg.steps, hp.clip, fairness=cfg.fairness,
                                              relation=cfg.relation)
    off = jnp.isinf(jnp.asarray(mu)) | (cfg.method == "nonprivate")  # rho = inf: no noise
    grad_std = jnp.where(off, 0.0, grad_std).astype(dtype)
    loss_std = jnp.where(off, 0.0, loss_std).astype(dtype)
    return grad_std, loss_std


class _Release(NamedTuple):
    """How one iteration's release is formed from the clipped group sums (all [K], traced):
    ``M1[:, k] = gscale_k * gsum_k + gstd_k * z``, ``M2_k = lscale_k * lsum_k + lstd_k * z'``."""

    gscale: jax.Array
    gstd: jax.Array
    lscale: jax.Array
    lstd: jax.Array


def _release_params(se, mu, n_k, hp: Hyperparams, cfg: Config) -> tuple[_Release, jax.Array]:
    """Scales and effective noise stds of the method (this is where ``scaling`` acts).

    ``n_k [K]``: the group sizes the method divides by (:func:`_denominators`: public sizes, or
    noisy counts >= 1 under add/remove, so every division is post-processing of released values;
    dividing a release calibrated to a sum by a number >= 1 never raises its sensitivity)."""
    dtype = n_k.dtype
    k_groups = n_k.shape[0]
    n = jnp.sum(n_k)
    paper = cfg.scaling == "paper"
    grad_std, loss_std = _noise_stds(se, mu, hp, cfg, dtype)
    ones = jnp.ones((k_groups,), dtype)
    zeros = jnp.zeros((k_groups,), dtype)
    if cfg.method == "pooled":
        scale = ones if paper else ones / n
        # one draw for the pooled sum: put it on the first column, M1 1_K is then the noisy sum
        gstd = zeros.at[0].set(grad_std[0] * scale[0])
        return _Release(scale, gstd, zeros, zeros), jnp.broadcast_to(grad_std, (k_groups,))
    if paper and cfg.fairness:
        gscale, gstd = 1.0 / n_k, grad_std  # Alg. 2 lines 10-11: group mean, noise for the sum
    elif paper:
        gscale, gstd = ones, grad_std  # Alg. 3 lines 8-9: noisy sum
    else:
        gscale, gstd = 1.0 / n_k, grad_std / n_k  # clip, sum, noise, then normalise
    if cfg.fairness:
        lscale, lstd = (ones / n, loss_std) if paper else (1.0 / n_k, loss_std / n_k)
    else:
        lscale, lstd = zeros, zeros
    return _Release(gscale, gstd, lscale, lstd), grad_std


def _scalar_ols(xs, cfg: Config) -> bool:
    """One feature, squared loss: the clipped gradient is ``clip(theta a_i - b_i, -D, D)``."""
    return xs.shape[0] == 1 and cfg.loss == "squared"


def _release(theta, xs, y, onehot, xnorm, rel: _Release, zg, zl, hp: Hyperparams, cfg: Config,
             pre=None, table: ClippedSumTable | None = None):
    """One iteration's private release: (M1 [P, K], M2 [K], fraction clipped).

    Clip each example's gradient to norm ``Delta`` (exact norm ``|dloss| ||x||``) and its loss
    to ``[0, Delta^2]``, sum per group (one matmul with the one-hot matrix), add the group's
    Gaussian noise (``zg [P, K]``, ``zl [K]`` standard normal draws) and normalise (the scales of
    :func:`_release_params`). With one feature and squared loss (``pre = (2 x^2, 2 x y)``) the
    clipped gradient ``2 (theta x - y) x`` clipped to norm ``Delta`` is the scalar clamp
    ``clip(theta a - b, -Delta, Delta)`` (same value, fewer operations per example). With a
    :class:`ClippedSumTable` (built for ``hp.clip``) the sums come from the table in
    ``O(K log n)``.
    """
    k_groups = onehot.shape[1]
    w = jnp.sum(onehot, axis=1)
    if table is not None:
        gs, ls, cnt = table_group_sums(table, theta[0], losses=cfg.fairness)
        gsum = gs[None, :]
        clipped = jnp.sum(cnt) / jnp.sum(w)
        loss = None
    elif pre is not None:
        g = theta[0] * pre[0] - pre[1]
        gsum = clip_to_interval(g, -hp.clip, hp.clip)[None, :] @ onehot
        clipped = jnp.sum(w * (jnp.abs(g) > hp.clip)) / jnp.sum(w)
        loss = (theta[0] * xs[0] - y) ** 2 if cfg.fairness else None
    else:
        pred = theta @ xs
        dl, loss = _dloss_and_loss(pred, y, cfg.loss)
        gnorm = jnp.abs(dl) * xnorm
        u = clip_to_norm(dl, gnorm, hp.clip, xs.shape[0] + 1)  # gradient u x has norm <= Delta
        gsum = (xs * u) @ onehot  # [P, K] clipped per-group gradient sums
        clipped = jnp.sum(w * (gnorm > hp.clip)) / jnp.sum(w)
    m1 = gsum * rel.gscale + rel.gstd * zg
    if cfg.fairness:
        # [K] (Alg. 2 line 13)
        lsum = ls if table is not None else clip_to_interval(loss, 0.0, hp.clip**2) @ onehot
        m2 = lsum * rel.lscale + rel.lstd * zl
    else:
        m2 = jnp.zeros((k_groups,), xs.dtype)
    return m1, m2, clipped


def _descent(z2, xs, y, onehot, xnorm, rel: _Release, hp: Hyperparams, cfg: Config,
             table: ClippedSumTable | None = None):
    """Projected noisy GD (Alg. 2 or 3) given the release parameters. Returns (theta, clipped)."""
    p = xs.shape[0]
    k_groups = onehot.shape[1]
    f_fn = _resolve_f(cfg.f)
    g_fn = _resolve_g(cfg.g)
    thresholds = jnp.broadcast_to(jnp.asarray(hp.thresholds, xs.dtype), (k_groups,))
    box = cfg.box

    pre = (2.0 * xs[0] * xs[0], 2.0 * xs[0] * y) if _scalar_ols(xs, cfg) and table is None else None

    def step(theta, z):
        m1, m2, clipped = _release(theta, xs, y, onehot, xnorm, rel, z[0], z[1], hp, cfg, pre,
                                   table)
        if cfg.fairness:
            wf = jax.grad(f_fn)(m2)
            gval, wg = jax.value_and_grad(g_fn)(m2, thresholds)
            w = wf + hp.fairness_weight * (gval >= 0) * wg  # eq. (1)-(2); Alg. 2 line 17
            grad = m1 @ w
        else:
            grad = jnp.sum(m1, axis=1)  # M 1_K (Alg. 3 line 12)
        theta = theta - hp.learning_rate * grad
        if math.isfinite(box):
            theta = jnp.clip(theta, -box, box)  # projection onto C_P
        return theta, clipped

    theta0 = jnp.zeros((p,), xs.dtype)
    theta, clipped = jax.lax.scan(step, theta0, z2)
    return theta, jnp.mean(clipped)


def _stage2(z2, xs, y, onehot, n_k, xnorm, se, mu, hp: Hyperparams, cfg: Config):
    """Projected noisy GD. Returns (theta [P], grad noise std [K], mean fraction clipped)."""
    rel, std = _release_params(se, mu, n_k, hp, cfg)
    theta, clipped = _descent(z2, xs, y, onehot, xnorm, rel, hp, cfg)
    return theta, std, clipped


@full_precision
def noisy_group_release(key: jax.Array, data: Dataset, theta: Any, se: Any,
                        hparams: Hyperparams, config: Config = Config()
                        ) -> tuple[jax.Array, jax.Array]:
    """Lower level: use :func:`~.algorithm.fit` (records no spend). One stage-2 iteration's
    release at ``theta``: ``(M1 [P, K], M2 [K])`` (Alg. 2 lines 6-16).

    ``M1[:, k]`` is group k's clipped gradient sum plus ``N(0, grad_std_k^2)`` noise, divided by
    ``n_k`` (default scaling); ``M2[k]`` the same for the clipped loss (zeros for Algorithm 3). For
    ``method="pooled"`` ``M1`` has one column (the noisy pooled sum, normalised). The noise stds
    are :func:`group_noise_stds` (with ``mu`` as in :func:`fit` and ``config.steps``); ``n_k`` is
    the public group size under replace-one and a fresh noisy count (``>= 1``) under add/remove.

    Privacy: ``mu/T``-zCDP (one of T iterations) under ``config.relation``; under add/remove plus
    ``count_fraction * rho`` for the noisy counts this call draws.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, _, (zg, zl), _, mu, den = _standalone(key, data, hparams, config, 1)
    se = jnp.asarray(se, xs.dtype)
    rel, _ = _release_params(se, mu, den, hparams, config)
    m1, m2, _ = _release(jnp.asarray(theta, xs.dtype), xs, y, onehot, xnorm, rel, zg[0], zl[0],
                         hparams, config)
    if config.method == "pooled":
        m1 = jnp.sum(m1, axis=1, keepdims=True)
    return m1, m2


@full_precision
def stage2_descent(key: jax.Array, data: Dataset, se: Any, hparams: Hyperparams,
                   config: Config = Config()) -> jax.Array:
    """Lower level: use :func:`~.algorithm.fit` (records no spend). Algorithm 2
    (``config.fairness=True``) or 3: ``mu``-zCDP projected DP-GD, ``mu = (1 -
    tau_fraction) rho`` (the whole ``rho`` for ``method`` ``"equal"``/``"pooled"``), with the
    allocation ``se`` (``sum se^2 = 1``). Returns theta ``[P]``.

    Privacy: ``mu``-zCDP (Lemmas B.2, B.3) under ``config.relation``, given public ``se`` (from
    stage 1, a private release, or fixed); under add/remove plus ``count_fraction * rho`` for the
    noisy counts.
    """
    _check_inputs(key, data, hparams, config)
    xs, y, onehot, xnorm, _, z2, _, mu, den = _standalone(key, data, hparams, config, config.steps)
    theta, _, _ = _stage2(z2, xs, y, onehot, den, xnorm, jnp.asarray(se, xs.dtype), mu, hparams,
                          config)
    return theta
