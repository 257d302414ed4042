"""Bounding values before they are summed: scalars clamped to an interval, vectors scaled to an L2
norm given their norms.

These are the clipping rules the kit's closed-form paths use where the per-example norm is known
without forming per-example gradients (generalized linear models: ``||dloss x|| = |dloss| ||x||``,
rows of a design matrix stored one column per example). :mod:`.clipping` clips pytrees of
per-example gradients; this module clips values whose norms the caller already has.

``clip_norm=inf`` leaves every value unchanged (``norm / inf = 0``), as everywhere in
:mod:`dpfair_jax.privacy`.

Privacy: a sum of ``n`` values clamped to ``[lower, upper]`` has the sensitivity
:func:`~dpfair_jax.privacy.relations.bounded_sum_sensitivity` ``(lower, upper)``; a sum of vectors
scaled to L2 norm ``<= C`` has :func:`~dpfair_jax.privacy.relations.clipped_sum_sensitivity`
``(C)``. Both hold only if the norms passed in are the values' true L2 norms (or upper bounds).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["clip_to_interval", "norm_clip_divisor", "clip_to_norm"]


def clip_to_interval(values: Any, lower: Any, upper: Any) -> jax.Array:
    """Each value clamped to ``[lower, upper]`` (``jnp.clip``; the bounds may be traced).

    Privacy: the sum of the clamped values has sensitivity ``bounded_sum_sensitivity(lower, upper)``
    (``max(|lower|, |upper|)`` add/remove, ``upper - lower`` replace-one)."""
    return jnp.clip(values, lower, upper)


def norm_clip_divisor(norms: Any, clip_norm: Any) -> jax.Array:
    """``max(1, norm / C)``: dividing a vector of L2 norm ``norm`` by it gives norm ``min(norm, C)``.

    ``norms`` ``[n]`` (or any shape), ``clip_norm`` a scalar or broadcastable array, traced or not;
    ``C = inf`` gives 1 (unchanged). A zero norm gives 1 (no division by zero).

    Privacy: see :func:`clip_to_norm`."""
    return jnp.maximum(1.0, norms / clip_norm)


def clip_to_norm(values: Any, norms: Any, clip_norm: Any) -> jax.Array:
    """``values / max(1, norms / C)``: each value (or vector, through broadcasting) whose L2 norm is
    ``norms`` scaled to norm ``<= C``.

    For a generalized linear model, pass the per-example derivative ``dloss`` ``[n]`` and the exact
    gradient norms ``|dloss| ||x||``: the result ``u`` gives clipped gradients ``u x``.

    Privacy: with ``norms`` the true L2 norms, a sum of the clipped vectors has sensitivity
    ``clipped_sum_sensitivity(C)`` (``C`` add/remove, ``2 C`` replace-one)."""
    return values / norm_clip_divisor(norms, clip_norm)
