"""Theorem 2 of paper 001: one DP-SGD step's expected group loss, split into its causes.

For the step ``theta' = theta - eta (gbar_B + psi)`` (clipped mean gradient of a uniformly drawn
batch ``B`` of fixed size, Gaussian noise ``psi``), a second-order expansion gives (eq. 4)::

    E[L(theta'; D_a)] ~ L(theta; D_a)
        - eta <g_a, g_D> + eta^2/2 E[g_B^T H_a g_B]                           (non-private)
        + eta (<g_a, g_D> - <g_a, gbar_D>) + eta^2/2 psi_a                     (R_a^clip, eq. 32)
        + eta^2/2 Tr(H_a) Var(psi)                                             (R_a^noise)
    psi_a = E[gbar_B^T H_a gbar_B] - E[g_B^T H_a g_B]

with ``g_a``/``gbar_a`` the mean (clipped) gradients over ``D_a`` and ``H_a`` the per-sample mean
Hessian of ``L(.; D_a)``. The expectations over batches are computed **exactly**, not sampled:
for a uniform batch of ``B`` out of ``n`` rows without replacement,
``E[u_B^T H u_B] = u_bar^T H u_bar + (n - B) / (B (n - 1)) * (1/n) sum_i (u_i - u_bar)^T H (u_i - u_bar)``.

Noise variance: the kit's DP-SGD adds ``N(0, (sigma C)^2)`` to the clipped **sum** and divides by
``B``, so ``Var(psi) = (sigma C / B)^2`` per coordinate (default, ``variant="sum"``); the proof of
Theorem 2 adds ``N(0, (C sigma)^2)`` to the **mean** (``variant="paper"``).

Public names: :func:`theorem2_decomposition`, :class:`Decomposition`, :func:`one_step_change_mc`,
:func:`theorem3_condition`, :func:`group_gradient_norms`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from dpfair_jax import _validation as v
from dpfair_jax.privacy.aggregation import gaussian_std
from dpfair_jax.privacy.clipping import clip_factors
from dpfair_jax.privacy.mechanisms import gaussian_noise

__all__ = ["Decomposition", "theorem2_decomposition", "one_step_change_mc", "theorem3_condition",
           "group_gradient_norms", "VARIANTS"]

VARIANTS = ("sum", "paper")
PyTree = Any


class Decomposition(NamedTuple):
    """Per-group terms of Theorem 2 (all ``[K]``; ``population`` fields are scalars for ``D``).

    ``loss`` L(theta; D_a); ``grad_norm`` ||g_a||; ``clipped_grad_norm`` ||gbar_a||;
    ``nonprivate`` -eta<g_a, g_D> + eta^2/2 E[g_B^T H_a g_B]; ``r_clip_first`` eta(<g_a, g_D> -
    <g_a, gbar_D>); ``psi`` E[gbar_B^T H_a gbar_B] - E[g_B^T H_a g_B]; ``r_clip`` =
    r_clip_first + eta^2/2 psi; ``r_noise`` eta^2/2 Tr(H_a) Var(psi); ``trace`` Tr(H_a);
    ``predicted_change`` = nonprivate + r_clip + r_noise (E[L(theta'; D_a)] - L(theta; D_a));
    ``fraction`` p_a = |D_a| / |D|; ``hessian_max_eig`` lambda_max(H_a) (beta_a of Lemma 2).
    """

    loss: jax.Array
    grad_norm: jax.Array
    clipped_grad_norm: jax.Array
    nonprivate: jax.Array
    r_clip_first: jax.Array
    psi: jax.Array
    r_clip: jax.Array
    r_noise: jax.Array
    trace: jax.Array
    predicted_change: jax.Array
    fraction: jax.Array
    hessian_max_eig: jax.Array
    population_grad_norm: jax.Array
    population_clipped_grad_norm: jax.Array


def _flat_loss(loss_fn, unravel):
    return lambda p, xi, yi: loss_fn(unravel(p), xi, yi)


def _clip_rows(g, clip_norm):
    """Rows clipped to ``clip_norm`` (``privacy.clipping.clip_factors``); ``inf`` leaves them."""
    norms = jnp.sqrt(jnp.sum(g * g, axis=1))
    factors = jnp.where(jnp.isinf(clip_norm), 1.0, clip_factors(norms, clip_norm))
    return g * factors[:, None], norms


def _noise_scale(noise_multiplier, clip_norm):
    """``sigma C`` (``privacy.aggregation.gaussian_std``), and 0 for ``sigma = 0`` (also when
    ``C = inf``, the unclipped noiseless step)."""
    return gaussian_std(noise_multiplier, clip_norm, jnp.result_type(clip_norm))


@functools.partial(jax.jit, static_argnames=("loss_fn", "num_groups", "batch_size", "variant"))
def _decompose(loss_fn, params, x, y, s, learning_rate, clip_norm, noise_multiplier, *, num_groups,
               batch_size, variant):
    flat, unravel = ravel_pytree(params)
    f = _flat_loss(loss_fn, unravel)
    dt = flat.dtype
    n = x.shape[0]
    eta = jnp.asarray(learning_rate, dt)
    c = jnp.asarray(clip_norm, dt)
    z = jnp.asarray(noise_multiplier, dt)
    losses, g = jax.vmap(jax.value_and_grad(f), in_axes=(None, 0, 0))(flat, x, y)  # [n], [n, P]
    gbar, _ = _clip_rows(g, c)
    oh = jax.nn.one_hot(s, num_groups, dtype=dt)  # [n, K]
    cnt = jnp.sum(oh, axis=0)
    wa = oh / jnp.maximum(cnt, 1.0)  # [n, K] group-mean weights
    g_a = wa.T @ g  # [K, P]
    gbar_a = wa.T @ gbar
    g_d = jnp.mean(g, axis=0)
    gbar_d = jnp.mean(gbar, axis=0)

    def group_hessian(w):
        return jax.hessian(lambda p: jnp.sum(w * jax.vmap(f, in_axes=(None, 0, 0))(p, x, y)))(flat)

    hs = jax.lax.map(group_hessian, wa.T)  # [K, P, P] per-sample mean Hessians
    fpc = (n - batch_size) / (batch_size * max(n - 1, 1))

    def batch_quad(u, u_bar, h):
        dev = u - u_bar
        within = jnp.mean(jnp.sum((dev @ h) * dev, axis=1))
        return u_bar @ h @ u_bar + fpc * within

    quad_np = jax.vmap(lambda h: batch_quad(g, g_d, h))(hs)
    quad_c = jax.vmap(lambda h: batch_quad(gbar, gbar_d, h))(hs)
    traces = jnp.trace(hs, axis1=1, axis2=2)
    zc = _noise_scale(z, c)
    var = (zc / batch_size) ** 2 if variant == "sum" else zc ** 2
    dot = g_a @ g_d
    dot_c = g_a @ gbar_d
    nonprivate = -eta * dot + 0.5 * eta ** 2 * quad_np
    r_clip_first = eta * (dot - dot_c)
    psi = quad_c - quad_np
    r_clip = r_clip_first + 0.5 * eta ** 2 * psi
    r_noise = 0.5 * eta ** 2 * traces * var
    return Decomposition(
        loss=(losses @ wa), grad_norm=jnp.linalg.norm(g_a, axis=1),
        clipped_grad_norm=jnp.linalg.norm(gbar_a, axis=1), nonprivate=nonprivate,
        r_clip_first=r_clip_first, psi=psi, r_clip=r_clip, r_noise=r_noise, trace=traces,
        predicted_change=nonprivate + r_clip + r_noise, fraction=cnt / n,
        hessian_max_eig=jax.vmap(lambda h: jnp.linalg.eigvalsh(h)[-1])(hs),
        population_grad_norm=jnp.linalg.norm(g_d), population_clipped_grad_norm=jnp.linalg.norm(gbar_d))


def _check(loss_fn, params, x, y, s, num_groups, learning_rate, clip_norm, noise_multiplier,
           batch_size) -> int:
    if not callable(loss_fn):
        raise ValueError("loss_fn must be a per-example loss loss_fn(params, x_i, y_i) -> scalar.")
    v.check_finite("x", x)
    v.check_finite("y", y)
    v.check_finite("params", params)
    n = v.check_same_length(x=x, y=y, s=s)
    num_groups = v.check_int("num_groups", num_groups, minimum=1)
    v.check_group_ids(s, num_groups)
    v.check_positive("learning_rate", learning_rate)
    v.check_clip_norm(clip_norm, allow_inf=True)
    v.check_noise_multiplier(noise_multiplier)
    if (not isinstance(clip_norm, jax.core.Tracer)
            and np.any(np.isinf(np.asarray(clip_norm, np.float64)))
            and (isinstance(noise_multiplier, jax.core.Tracer)
                 or np.any(np.asarray(noise_multiplier, np.float64) != 0))):
        raise ValueError("clip_norm=inf (no clipping) is accepted only with noise_multiplier=0 "
                         "(the noiseless step; an unclipped gradient has infinite sensitivity).")
    batch_size = v.check_int("batch_size", batch_size, minimum=1)
    if batch_size > n:
        raise ValueError(f"batch_size ({batch_size}) must be <= n ({n}).")
    return batch_size


def theorem2_decomposition(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array,
                           s: jax.Array, num_groups: int, *, learning_rate: Any, clip_norm: Any,
                           noise_multiplier: Any, batch_size: int,
                           variant: str = "sum") -> Decomposition:
    """Theorem 2's decomposition of one DP-SGD step (paper 001, eqs. 4, 12-18, 32) per group.

    ``loss_fn(params, x_i, y_i)``: per-example loss. Exact expectations over fixed-size batches
    drawn uniformly without replacement (``dpsgd.fit`` with ``sampling="fixed_size"``) and over the
    noise; full Hessians of the flattened parameters (small models: ``K P^2`` memory).
    ``learning_rate``, ``clip_norm``, ``noise_multiplier`` are traced (vmap over a C grid).
    """
    batch_size = _check(loss_fn, params, x, y, s, num_groups, learning_rate, clip_norm,
                        noise_multiplier, batch_size)
    v.check_choice("variant", variant, VARIANTS)
    return _decompose(loss_fn, params, x, y, s, learning_rate, clip_norm, noise_multiplier,
                      num_groups=num_groups, batch_size=batch_size, variant=variant)


@functools.partial(jax.jit, static_argnames=("loss_fn", "num_groups", "batch_size", "variant", "num_draws"))
def _step_mc(key, loss_fn, params, x, y, s, learning_rate, clip_norm, noise_multiplier, *,
             num_groups, batch_size, variant, num_draws):
    flat, unravel = ravel_pytree(params)
    f = _flat_loss(loss_fn, unravel)
    dt = flat.dtype
    n = x.shape[0]
    oh = jax.nn.one_hot(s, num_groups, dtype=dt)
    wa = oh / jnp.maximum(jnp.sum(oh, axis=0), 1.0)

    def group_loss(p):
        return jax.vmap(f, in_axes=(None, 0, 0))(p, x, y) @ wa

    base = group_loss(flat)
    c = jnp.asarray(clip_norm, dt)
    zc = _noise_scale(noise_multiplier, c)
    std = zc / batch_size if variant == "sum" else zc

    def one(k):
        kb, kn = jax.random.split(k)
        idx = jax.random.permutation(kb, n)[:batch_size]
        g = jax.vmap(jax.grad(f), in_axes=(None, 0, 0))(flat, x[idx], y[idx])
        gbar, _ = _clip_rows(g, c)
        step = jnp.mean(gbar, axis=0)
        noise = gaussian_noise(kn, flat.shape, std, dt)
        plus = group_loss(flat - learning_rate * (step + noise))
        minus = group_loss(flat - learning_rate * (step - noise))
        return 0.5 * (plus + minus) - base

    vals = jax.lax.map(one, jax.random.split(key, num_draws), batch_size=min(256, num_draws))
    return jnp.mean(vals, axis=0), jnp.std(vals, axis=0, ddof=1) / jnp.sqrt(num_draws)


def one_step_change_mc(key: jax.Array, loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array,
                       s: jax.Array, num_groups: int, *, learning_rate: Any, clip_norm: Any,
                       noise_multiplier: Any, batch_size: int, num_draws: int = 2000,
                       variant: str = "sum") -> tuple[jax.Array, jax.Array]:
    """Directly measured ``E[L(theta'; D_a)] - L(theta; D_a)`` for one DP-SGD step ``[K]``, and its SE.

    Monte Carlo over ``num_draws`` (batch, noise) draws in one program, noise antithetic (``+-psi``).
    The reference for :func:`theorem2_decomposition`'s ``predicted_change``.
    """
    v.check_threefry_key(key)
    batch_size = _check(loss_fn, params, x, y, s, num_groups, learning_rate, clip_norm,
                        noise_multiplier, batch_size)
    v.check_choice("variant", variant, VARIANTS)
    num_draws = v.check_int("num_draws", num_draws, minimum=2)
    return _step_mc(key, loss_fn, params, x, y, s, learning_rate, clip_norm, noise_multiplier,
                    num_groups=num_groups, batch_size=batch_size, variant=variant, num_draws=num_draws)


def group_gradient_norms(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, s: jax.Array,
                         num_groups: int, clip_norm: Any) -> dict[str, jax.Array]:
    """``||g_a||``, ``||gbar_a||`` per group and the mean per-example norm per group (Thm 3, App. C.2)."""
    return _norms(loss_fn, params, x, y, s, clip_norm, num_groups=num_groups)


@functools.partial(jax.jit, static_argnames=("loss_fn", "num_groups"))
def _norms(loss_fn, params, x, y, s, clip_norm, *, num_groups):
    flat, unravel = ravel_pytree(params)
    g = jax.vmap(jax.grad(_flat_loss(loss_fn, unravel)), in_axes=(None, 0, 0))(flat, x, y)
    gbar, norms = _clip_rows(g, jnp.asarray(clip_norm, g.dtype))
    oh = jax.nn.one_hot(s, num_groups, dtype=g.dtype)
    wa = oh / jnp.maximum(jnp.sum(oh, axis=0), 1.0)
    return {"grad_norm": jnp.linalg.norm(wa.T @ g, axis=1),
            "clipped_grad_norm": jnp.linalg.norm(wa.T @ gbar, axis=1),
            "mean_example_norm": norms @ wa}


def theorem3_condition(grad_norm_a: Any, grad_norm_b: Any, p_a: Any, p_b: Any, clip_norm: Any) -> jax.Array:
    """Theorem 3 (eq. 5): ``R_a^clip > R_b^clip`` is guaranteed when
    ``||g_a|| p_a^2 / 2 >= 5/2 C + ||g_b|| (1 + p_b + p_b^2 / 2)`` (two groups, eta <= 1/max beta)."""
    ga, gb = jnp.asarray(grad_norm_a), jnp.asarray(grad_norm_b)
    pa, pb = jnp.asarray(p_a), jnp.asarray(p_b)
    return ga * pa ** 2 / 2 >= 2.5 * jnp.asarray(clip_norm) + gb * (1 + pb + pb ** 2 / 2)
