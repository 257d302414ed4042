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

__all__ = ["clip_to_interval", "clip_margin", "safe_clip_norm", "norm_clip_divisor", "clip_to_norm"]


def clip_margin(size: int, dtype: Any) -> float:
    """Relative margin ``m = (size + 8) u`` (``u`` the unit roundoff of ``dtype``, ``2^-24`` for
    float32) by which the clip rules shrink ``C``, so that rounding errs on the safe side.

    A norm computed in floating point as ``sqrt`` of a sum of ``size`` squares, in any summation
    order, underestimates the true norm of the stored vector by at most ``(size / 2 + 1) u``
    relative (first order; Higham, *Accuracy and Stability of Numerical Algorithms*, Sec. 4.2:
    a sum of ``k`` nonnegative terms is off by ``<= (k - 1) u`` relative); forming the factor
    ``C (1 - m) / norm`` and scaling the vector by it adds ``<= 3 u``. Scaling to ``C (1 - m)``
    therefore leaves every clipped vector with true L2 norm ``<= C``. ``size``: how many squared
    terms each norm sums (the per-example parameter count; ``1`` for norms that are exact)."""
    size = int(size)
    if size < 1:
        raise ValueError(f"size must be a positive int (the number of squared terms), got {size!r}.")
    u = float(jnp.finfo(dtype).eps) / 2.0
    m = (size + 8) * u
    if m >= 0.5:
        raise ValueError(f"a norm over {size} {jnp.dtype(dtype).name} terms cannot be bounded to within "
                         "a factor 2 by its rounding analysis; compute in a wider dtype.")
    return m


def safe_clip_norm(clip_norm: Any, size: int, dtype: Any) -> jax.Array:
    """``C (1 - clip_margin(size, dtype))`` in ``dtype`` (``inf`` and ``0`` unchanged): the norm the
    clip rules scale to, so that every clipped vector's true norm is ``<= C``."""
    return jnp.asarray(clip_norm, dtype) * jnp.asarray(1.0 - clip_margin(size, dtype), dtype)


def clip_to_interval(values: Any, lower: Any, upper: Any) -> jax.Array:
    """Each value clamped to ``[lower, upper]`` (``jnp.clip``; the bounds may be traced).

    Privacy: the sum of the clamped values has sensitivity ``bounded_sum_sensitivity(lower, upper)``
    (``max(|lower|, |upper|)`` add/remove, ``upper - lower`` replace-one)."""
    return jnp.clip(values, lower, upper)


def norm_clip_divisor(norms: Any, clip_norm: Any, size: int = 1) -> jax.Array:
    """``max(1, norm / C')`` with ``C' = C (1 - clip_margin(size))``: dividing a vector of L2 norm
    ``norm`` by it gives norm ``<= C`` (``min(norm, C)`` up to the margin, which covers the
    rounding of a norm of ``size`` squared terms and of the division; :func:`clip_margin`).

    ``norms`` ``[n]`` (or any shape), ``clip_norm`` a scalar or broadcastable array, traced or not;
    ``C = inf`` gives 1 (unchanged). A zero norm gives 1 (no division by zero).

    Privacy: see :func:`clip_to_norm`."""
    norms = jnp.asarray(norms)
    dt = norms.dtype if jnp.issubdtype(norms.dtype, jnp.floating) else jnp.float32
    return jnp.maximum(1.0, norms / safe_clip_norm(clip_norm, size, dt))


def clip_to_norm(values: Any, norms: Any, clip_norm: Any, size: int = 1) -> jax.Array:
    """``values / max(1, norms / C')``: each value (or vector, through broadcasting) whose L2 norm is
    ``norms`` scaled to norm ``<= C`` (``C'`` and ``size`` as in :func:`norm_clip_divisor`).

    For a generalized linear model, pass the per-example derivative ``dloss`` ``[n]`` and the exact
    gradient norms ``|dloss| ||x||``: the result ``u`` gives clipped gradients ``u x``.

    Privacy: with ``norms`` the true L2 norms, a sum of the clipped vectors has sensitivity
    ``clipped_sum_sensitivity(C)`` (``C`` add/remove, ``2 C`` replace-one)."""
    return values / norm_clip_divisor(norms, clip_norm, size)
