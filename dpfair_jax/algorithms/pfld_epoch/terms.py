"""The terms of PF-LD's per-epoch Lagrangian (:mod:`dpfair_jax.algorithms.pfld_epoch`): the
per-example penalty ``pen_i`` of the primal steps, the clipped soft joint counts each epoch
releases and the violations formed from them (post-processing).

Privacy: :func:`soft_counts` has L2 sensitivity ``clip`` under add/remove (each contribution
clipped); :func:`penalty_one` reads example ``i`` only (its gradient is clipped by the primal
step); :func:`violations_from_counts` is post-processing of released counts.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpfair_jax.privacy import clipping as C

__all__ = ["penalty_one", "soft_counts", "violations_from_counts"]


def penalty_one(probs: jax.Array, s: Any, c: Any, nu: jax.Array, p_s: jax.Array) -> jax.Array:
    """``pen_i = sum_j F_j [nu_{c, s, j} / p(s | c) - sum_g nu_{c, g, j}]`` for one example
    (``nu [C, k, l]``, ``p_s [C, k]``); its mean over the data is ``sum p(c) nu h`` (module docstring).
    Rows are taken as masked sums (no scatter in the per-example gradient)."""
    hit_c = (jnp.arange(nu.shape[0]) == c)[:, None, None]
    nuc = jnp.sum(jnp.where(hit_c, nu, 0.0), axis=0)  # [k, l]
    pc = jnp.sum(jnp.where(hit_c[:, :, 0], p_s, 0.0), axis=0)  # [k]
    hit_s = jnp.arange(nuc.shape[0]) == s
    row = jnp.sum(jnp.where(hit_s[:, None], nuc, 0.0), axis=0)  # [l]
    ps = jnp.sum(jnp.where(hit_s, pc, 0.0))
    coef = row / jnp.maximum(ps, 1e-12) - jnp.sum(nuc, axis=0)
    return jnp.sum(coef * probs)


def soft_counts(probs: jax.Array, s: jax.Array, c: jax.Array, num_conditions: int, num_groups: int,
                clip: Any) -> jax.Array:
    """Clipped sum of the per-example contributions ``e_{c_i} (x) e_{s_i} (x) F(x_i)``: ``[C, k, l]``.

    The L2 norm of one contribution is ``|F(x_i)|_2``; it is clipped to ``clip``
    (:func:`dpfair_jax.privacy.clipping.clip_per_example`), so the sum has L2 sensitivity ``clip``
    under add/remove."""
    cs = jax.nn.one_hot(c, num_conditions)[:, :, None] * jax.nn.one_hot(s, num_groups)[:, None, :]
    contrib = cs[:, :, :, None] * probs[:, None, None, :]  # [n, C, k, l]
    clipped = C.clip_per_example(contrib, clip)[0]
    return jnp.sum(clipped, axis=0)


def violations_from_counts(J: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(h [C, k, l], p(g | c) [C, k])`` from (noisy) soft joint counts ``J [C, k, l]``: group sizes
    ``n_{c,g} = max(sum_j J, 1)``, ``h = J / n_{c,g} - sum_g J / sum_g n_{c,g}``."""
    N = jnp.maximum(jnp.sum(J, axis=-1), 1.0)  # [C, k]
    rate = J / N[..., None]
    marg = jnp.sum(J, axis=1) / jnp.sum(N, axis=1, keepdims=True)  # [C, l]
    return rate - marg[:, None, :], N / jnp.sum(N, axis=1, keepdims=True)
