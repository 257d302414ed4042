"""Noise scales of the min-max family (noisy DP-SGDA, DP-FERMI, PF-LD): the Gaussian std on a
clipped sum, the per-step shift of two Gaussian releases on one batch and its inverse, and the
data-independent draw of DP-SGDA's returned iterate.

Privacy: each function states the sensitivity it assumes and the guarantee of what it returns;
the accounting of a whole run stays in :mod:`dpfair_jax.privacy.accounting`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

__all__ = [
    "clipped_sum_std",
    "multiplier_of_std",
    "combined_shift",
    "multiplier_for_shift",
    "random_iterate",
]


def clipped_sum_std(noise_multiplier: Any, clip_norm: Any, sensitivity_factor: float = 1.0) -> jax.Array:
    """The std ``z * C * k`` (float32; 0 where ``z = 0``, also for ``C = inf``) of Gaussian noise on
    a sum of rows clipped to L2 norm ``C``, whose sensitivity is ``k C`` (``k``: 1 add/remove, 2
    replace-one, :func:`dpfair_jax.privacy.relations.replace_factor`). ``z``, ``C`` may be traced.

    Privacy: noise of this std on that sum is the Gaussian mechanism with noise multiplier ``z``:
    ``1 / (2 z^2)``-zCDP under the relation of ``k``.
    """
    z = jnp.asarray(noise_multiplier, jnp.float32)
    return jnp.where(z == 0, 0.0, z * jnp.asarray(clip_norm, jnp.float32) * sensitivity_factor)


def multiplier_of_std(std: float, clip_norm: float, sensitivity_factor: float = 1.0) -> float:
    """The noise multiplier ``std / (C k)`` of a Gaussian of std ``std`` on a clipped sum of
    sensitivity ``k C`` (the inverse of :func:`clipped_sum_std`; host floats).

    Privacy: that multiplier ``z`` is a ``1 / (2 z^2)``-zCDP Gaussian release of the sum.
    """
    return std / (clip_norm * sensitivity_factor)


def combined_shift(noise_multiplier_a: float, noise_multiplier_b: float) -> float:
    """``mu = sqrt(z_a^-2 + z_b^-2)``: the shift, in standard deviations, of the two Gaussian
    releases (multipliers ``z_a``, ``z_b``, each of a clipped sum of sensitivity 1 in its units)
    that one record moves in a step where it is sampled (DP-SGDA's descent and ascent).

    Privacy: the pair is one Gaussian mechanism with shift ``mu``: ``mu^2 / 2``-zCDP per step.
    """
    return math.sqrt(noise_multiplier_a ** -2 + noise_multiplier_b ** -2)


def multiplier_for_shift(mu: float, ratio: float) -> float:
    """The ``z`` with ``combined_shift(z, ratio * z) == mu``: ``sqrt(1 + ratio^-2) / mu`` (the
    second multiplier is ``ratio * z``; host floats).

    Privacy: the two releases at ``(z, ratio z)`` have per-step shift ``mu`` (``mu^2 / 2``-zCDP).
    """
    return math.sqrt(1.0 + ratio ** -2) / mu


def random_iterate(key: jax.Array, steps: int) -> jax.Array:
    """``t_hat ~ U{1, ..., steps}``: the index of the iterate DP-SGDA returns with
    ``iterate="random"`` (Theorem E.3).

    Privacy: data-independent (only the key); returning iterate ``t_hat`` is post-processing of
    the released updates and costs nothing.
    """
    return jax.random.randint(key, (), 1, steps + 1)
