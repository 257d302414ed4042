"""The compiled program of :func:`dpfair_jax.algorithms.mitigation.fit` (paper 001's (gamma1,
gamma2) mitigation, a reconstruction; the method, its privacy and its keys are in
:mod:`dpfair_jax.algorithms.mitigation`'s docstring).

:func:`program` is one jitted ``lax.scan`` over the steps; each step (:func:`_step`) samples a
Poisson batch (:func:`_batch`), forms the group sums of the clipped statistics
(:func:`_batch_group_sums`) and releases them with Gaussian noise (:func:`_release_stats`; or,
with ``stats_every = k``, holds the full-data release of :func:`_full_data_stats`), turns the
released signs and fractions into the per-example penalty weights, clips and sums the augmented
gradients (:func:`_clipped_penalized_sum`) and takes the noisy optimizer step. The static
choices travel in :class:`ProgramConfig`, the run's traced constants in :class:`_Run`.

Privacy: per step, the statistics Gaussian (sensitivity :data:`STATS_SENSITIVITY`, multiplier
``stats_noise_multiplier``) and the clipped-sum Gaussian (sensitivity ``C``, or ``C + C_p`` with
separate clipping) on one Poisson-sampled batch; ``mitigation.spend`` accounts both.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpfair_jax.analysis.hessian import prediction_uncertainty
from dpfair_jax.privacy import aggregation as _agg
from dpfair_jax.privacy import bounding as _bnd
from dpfair_jax.privacy import clipping as _clip
from dpfair_jax.privacy import mechanisms as _mech
from dpfair_jax.privacy import sampling as _sampling

__all__ = ["STATS_SENSITIVITY", "ProgramConfig", "penalty_coefficients", "program"]

STATS_SENSITIVITY = math.sqrt(3.0)


class ProgramConfig(NamedTuple):
    """The static choices of one compiled run (hashable: the jit's static argument)."""

    model: Any
    loss: Any
    n: int
    batch_size: int
    max_batch_size: int
    steps: int
    num_groups: int
    num_outputs: int
    optimizer: Any
    diagnostics: bool
    stats_every: int = 0  # 0: statistics of every step's batch; k >= 1: of the full data every k steps


class _Run(NamedTuple):
    """The traced constants of one run, the same at every step."""

    x: Any
    y: Any
    s: Any
    data_mask: Any
    full_mask: Any
    dt: Any
    clip_norm: Any
    pclip: Any
    sensitivity: Any
    noise_multiplier: Any
    denominator: Any
    q: float
    stats_std: Any
    g1: Any
    g2: Any
    u_max: float
    opt: Any


def penalty_coefficients(stat: jax.Array, fractions: jax.Array) -> jax.Array:
    """``c_a = sign(stat_a - stat) / p_a - sum_b sign(stat_b - stat)`` with ``stat = sum_a p_a stat_a``.

    ``(1/B) sum_i c_{a(i)} d_i`` is the gradient of ``sum_a |stat_a - stat|`` when ``stat_a`` is
    the mean over group ``a`` of per-example quantities with gradients ``d_i`` (signs held fixed).
    Lower level: use fit (records no spend).
    """
    p = jnp.asarray(fractions)
    pop = jnp.sum(p * stat)
    sgn = jnp.sign(stat - pop)
    return sgn / jnp.maximum(p, 1e-6) - jnp.sum(sgn)


def _safe_norm(tree) -> jax.Array:
    sq = sum(jnp.sum(leaf * leaf) for leaf in jax.tree_util.tree_leaves(tree))
    return jnp.sqrt(jnp.maximum(sq, 1e-24))


def _uncertainty(cfg: ProgramConfig, p, xi) -> jax.Array:
    """``u(x) = 1 - sum_k f_k(x)^2`` of one example (App. D's Hessian-trace proxy)."""
    out = cfg.model.apply(p, xi)
    probs = jax.nn.sigmoid(out) if cfg.num_outputs == 1 else jax.nn.softmax(out)
    return prediction_uncertainty(probs[None])[0]


def _group_sums(cfg: ProgramConfig, run: _Run, norms, unc, groups, mask) -> jax.Array:
    """``[K, 3]`` group sums of each example's ``(1, min(norm, C) / C, u / u_max)`` (each entry in
    [0, 1], L2 norm <= sqrt 3)."""
    contrib = jnp.stack([jnp.ones_like(norms), _bnd.clip_to_interval(norms, 0.0, run.clip_norm) / run.clip_norm,
                         jnp.clip(unc / run.u_max, 0.0, 1.0)], axis=1) * mask[:, None]
    return jax.nn.one_hot(groups, cfg.num_groups, dtype=run.dt).T @ contrib  # [K, 3]


def _release_stats(run: _Run, key, sums) -> tuple:
    """The Gaussian release of the group sums and its post-processing: ``(noisy sums, fractions
    p_a, mean clipped norms m_a / C, mean uncertainties t_a / u_max)``."""
    noisy = _mech.gaussian_mechanism(key, sums, run.stats_std)
    cnt = jnp.maximum(noisy[:, 0], 1.0)
    frac = cnt / jnp.sum(cnt)
    return noisy, frac, jnp.clip(noisy[:, 1] / cnt, 0.0, 1.0), jnp.clip(noisy[:, 2] / cnt, 0.0, 1.0)


# rows per block of the full-data gradient norms: the per-example gradients of one block are held at
# a time (a whole Adult split at once is n x params floats per model: 35 GB for 320 vmapped models)
FULL_DATA_BLOCK = 1024


def _full_data_norms(cfg: ProgramConfig, run: _Run, p) -> jax.Array:
    """``[n]`` per-example gradient norms of every row, computed ``FULL_DATA_BLOCK`` rows at a time
    (``lax.map`` over blocks; the same per-example values as one ``vmap`` over all rows)."""
    n = run.x.shape[0]
    block = min(FULL_DATA_BLOCK, n)
    pad = (-n) % block

    def blocks(a):
        a = jnp.pad(a, ((0, pad),) + ((0, 0),) * (a.ndim - 1))
        return a.reshape((-1, block) + a.shape[1:])

    def norms(b):
        return _clip.per_example_norms(jax.vmap(jax.grad(cfg.loss), in_axes=(None, 0, 0))(p, *b))

    return jax.lax.map(norms, (blocks(run.x), blocks(run.y))).reshape(-1)[:n]


def _full_data_stats(cfg: ProgramConfig, run: _Run, p, key) -> tuple:
    """The statistics of every row (``stats_every >= 1``), released as :func:`_release_stats`."""
    norms = _full_data_norms(cfg, run, p)
    unc = jax.vmap(functools.partial(_uncertainty, cfg), in_axes=(None, 0))(p, run.x)
    return _release_stats(run, key, _group_sums(cfg, run, norms, unc, run.s, run.full_mask))


def _batch(cfg: ProgramConfig, run: _Run, key, seen: dict) -> tuple:
    """One padded Poisson batch: ``(mask, x, y, s)`` of its rows (``seen``: what was sampled)."""
    sample = _sampling.poisson_sample(key, cfg.n, run.q, cfg.max_batch_size)
    idx, mask = sample.indices, sample.mask.astype(run.dt)
    seen.update(sampler="poisson", sample_rate=run.q, batch_width=int(idx.shape[0]), dataset_size=cfg.n)
    if run.data_mask is not None:
        mask = mask * run.data_mask[idx].astype(run.dt)
    return mask, run.x[idx], run.y[idx], run.s[idx]


def _clipped_penalized_sum(cfg: ProgramConfig, run: _Run, params, xb, yb, grads, norms, mask, c1, c2):
    """The clipped sum of ``g_i + gamma1 c1_a nabla ||g_i|| + gamma2 c2_a nabla u(x_i)`` (jointly
    clipped to ``C``, or the loss part to ``C`` and the penalty part to ``C_p``); the penalty
    terms are exact zeros when ``gamma1 = gamma2 = 0``."""
    pclip = run.pclip
    pg1 = jax.vmap(jax.grad(lambda p, xi, yi: _safe_norm(jax.grad(cfg.loss)(p, xi, yi))),
                   in_axes=(None, 0, 0))(params, xb, yb)
    pg2 = jax.vmap(jax.grad(functools.partial(_uncertainty, cfg)), in_axes=(None, 0))(params, xb)
    w1 = run.g1 * c1
    w2 = run.g2 * c2

    def combine(g, a, b):
        shp = (-1,) + (1,) * (g.ndim - 1)
        return g + (w1.reshape(shp) * a + w2.reshape(shp) * b)

    if pclip is not None:  # loss part clipped to C, penalty part to C_p: sensitivity C + C_p
        pen = jax.tree_util.tree_map(lambda a, b: combine(jnp.zeros_like(a), a, b), pg1, pg2)
        cf = _clip.clip_factors(norms, run.clip_norm, _clip.example_size(grads)) * mask
        cfp = _clip.clip_factors(_clip.per_example_norms(pen), pclip, _clip.example_size(pen)) * mask
        return jax.tree_util.tree_map(jnp.add, _clip.weighted_sum(grads, cf), _clip.weighted_sum(pen, cfp))
    aug = jax.tree_util.tree_map(combine, grads, pg1, pg2)
    norms_aug = _clip.per_example_norms(aug)
    cf = _clip.clip_factors(norms_aug, run.clip_norm, _clip.example_size(aug)) * mask
    return _clip.weighted_sum(aug, cf)


def _diagnostics(run: _Run, losses, norms, mask, stats) -> dict:
    """The step's released statistics (``private_group_*``) and its non-private loss and norm."""
    noisy, frac, m_a, t_a = stats
    bsz = jnp.maximum(jnp.sum(mask), 1.0)
    return {"loss": jnp.sum(losses * mask) / bsz, "mean_grad_norm": jnp.sum(norms * mask) / bsz,
            "private_group_clipped_norm": m_a * run.clip_norm, "private_group_uncertainty": t_a * run.u_max,
            "private_group_fraction": frac, "private_group_sums": noisy}


def _step(cfg: ProgramConfig, run: _Run, seen: dict, carry, k):
    """One step: statistics, penalty weights, clipped sum, noise and update (key ``k``: the
    update's sampling and noise keys are ``split(k)``, the statistics' ``fold_in(k, 2)``)."""
    if cfg.stats_every:  # statistics of the full data, refreshed every stats_every steps
        params, opt_state, t, held = carry
        held = jax.lax.cond(t % cfg.stats_every == 0,
                            lambda: _full_data_stats(cfg, run, params, jax.random.fold_in(k, 2)),
                            lambda: held)
    else:
        params, opt_state = carry
    k_sample, k_noise = jax.random.split(k)
    mask, xb, yb, sb = _batch(cfg, run, k_sample, seen)
    losses, grads = jax.vmap(jax.value_and_grad(cfg.loss), in_axes=(None, 0, 0))(params, xb, yb)
    norms = _clip.per_example_norms(grads)
    unc = jax.vmap(functools.partial(_uncertainty, cfg), in_axes=(None, 0))(params, xb)
    sums = _group_sums(cfg, run, norms, unc, sb, mask)
    # its own key: fold_in(k_noise, i) would be split(k_noise, L)[i], the gradient noise of leaf i
    stats = held if cfg.stats_every else _release_stats(run, jax.random.fold_in(k, 2), sums)
    _, frac, m_a, t_a = stats
    c1 = penalty_coefficients(m_a, frac)[sb]
    c2 = penalty_coefficients(t_a, frac)[sb]
    sums_g = _clipped_penalized_sum(cfg, run, params, xb, yb, grads, norms, mask, c1, c2)
    grad = _agg.noised_mean(k_noise, sums_g, sensitivity=run.sensitivity, noise_multiplier=run.noise_multiplier,
                            denominator=run.denominator)
    updates, opt_state = run.opt.update(grad, opt_state, params)
    params = optax.apply_updates(params, updates)
    diag = _diagnostics(run, losses, norms, mask, stats) if cfg.diagnostics else {}
    if cfg.stats_every:
        return (params, opt_state, t + 1, held), diag
    return (params, opt_state), diag


@functools.partial(jax.jit, static_argnums=(0,))
def program(cfg: ProgramConfig, key, params, x, y, s, data_mask, clip_norm, noise_multiplier,
            stats_noise_multiplier, gamma1, gamma2, learning_rate, penalty_clip_norm=None):
    """The run: ``cfg.steps`` steps of :func:`_step` in one ``lax.scan`` (keys ``split(key, steps
    + 1)[:-1]``); returns ``(params, per-step diagnostics, SamplingReport)``. Lower level: use
    ``mitigation.fit`` (records no spend)."""
    # float32 at least (as dpsgd.fit), whatever precision x comes in
    dt = jnp.promote_types(jnp.result_type(x), jnp.float32)
    x = x.astype(dt) if jnp.result_type(x) != dt else x
    clip_norm = jnp.asarray(clip_norm, dt)
    noise_multiplier = jnp.asarray(noise_multiplier, dt)
    separate = penalty_clip_norm is not None  # clip the loss and the penalty parts separately
    pclip = jnp.asarray(penalty_clip_norm, dt) if separate else None
    # the sensitivity of the clipped sum (add/remove-one)
    sensitivity = clip_norm + pclip if separate else clip_norm
    opt = cfg.optimizer if isinstance(cfg.optimizer, optax.GradientTransformation) else cfg.optimizer(learning_rate)
    stats_std = _agg.gaussian_std(stats_noise_multiplier, STATS_SENSITIVITY, dt)
    full_mask = jnp.ones((cfg.n,), dt) if data_mask is None else data_mask.astype(dt)
    run = _Run(x, y, s, data_mask, full_mask, dt, clip_norm, pclip, sensitivity, noise_multiplier,
               jnp.asarray(cfg.batch_size, dt), cfg.batch_size / cfg.n, stats_std, jnp.asarray(gamma1, dt),
               jnp.asarray(gamma2, dt), 1.0 - 1.0 / max(cfg.num_outputs, 2), opt)
    seen: dict = {}  # what the traced step samples, for the run's SamplingReport
    step = functools.partial(_step, cfg, run, seen)
    keys = jax.random.split(key, cfg.steps + 1)
    if cfg.stats_every:
        k_cnt = cfg.num_groups
        held0 = (jnp.zeros((k_cnt, 3), dt), jnp.full((k_cnt,), 1.0 / k_cnt, dt), jnp.zeros((k_cnt,), dt),
                 jnp.zeros((k_cnt,), dt))
        (params, *_), diag = jax.lax.scan(step, (params, opt.init(params), jnp.int32(0), held0), keys[:-1])
    else:
        (params, _), diag = jax.lax.scan(step, (params, opt.init(params)), keys[:-1])
    return params, diag, _sampling.SamplingReport(steps=int(keys[:-1].shape[0]), **seen)  # scan length
