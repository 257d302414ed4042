"""Traced noise scales of the Gaussian and Laplace mechanisms under zCDP, and the pure-DP <-> zCDP
budget conversions the statistics family runs inside ``jit``/``vmap``.

:mod:`dpfair_jax.privacy.accounting` holds the host-side (float64) arithmetic: ``gaussian_rho``,
``gaussian_sigma_for_rho``, ``pure_dp_to_rho``; its functions refuse traced values. The functions
here are the same closed forms on JAX arrays (a budget may be a traced grid under ``vmap``), with
the float operations in a fixed order so that a run's numbers do not depend on who computes its
scale. Each takes the sensitivity of the release (under the caller's neighbouring relation, e.g.
from :mod:`dpfair_jax.privacy.relations`) and its budget, and gives the scale the mechanism draws
with (:mod:`dpfair_jax.privacy.mechanisms`).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.privacy.zcdp import dp_to_rho, zcdp_to_dp

__all__ = ["float32_rho_for_epsilon", "gaussian_std", "gaussian_std_or_zero", "gaussian_stds_at_rho", "gaussian_std_per_step",
           "host_gaussian_std_per_step", "laplace_scale", "pure_dp_rho", "pure_dp_epsilon", "clip_to_ball_scale"]


def gaussian_std(sensitivity: Any, rho: Any) -> jax.Array:
    """``sensitivity / sqrt(2 rho)``: the noise std that makes a release of l2-sensitivity
    ``sensitivity`` ``rho``-zCDP (Bun & Steinke 2016, Prop. 1.6); traced-friendly, elementwise.

    Privacy: ``q(D) + N(0, std^2 I)`` is ``rho``-zCDP under the relation ``sensitivity`` is for.
    """
    return sensitivity / jnp.sqrt(2.0 * rho)


def gaussian_std_or_zero(sensitivity: Any, rho: Any) -> jax.Array:
    """:func:`gaussian_std`, and 0 where ``rho = inf`` (an infinite budget: no noise).

    Privacy: as :func:`gaussian_std` for finite ``rho``; none where ``rho = inf``.
    """
    return jnp.where(jnp.isinf(rho), 0.0, gaussian_std(sensitivity, rho))


def gaussian_stds_at_rho(rho: Any, *sensitivities: Any) -> tuple[jax.Array, ...]:
    """Noise stds of several releases that each spend ``rho``: ``sensitivity_i * u`` with one
    ``u = 1 / sqrt(2 rho)`` (``inf`` where ``rho <= 0``: no budget, no finite noise).

    Privacy: each release ``q_i(D) + N(0, std_i^2 I)`` of l2-sensitivity ``sensitivity_i`` is
    ``rho``-zCDP (Bun & Steinke 2016, Prop. 1.6); together they compose to ``len(sensitivities)
    rho``.
    """
    rho = jnp.asarray(rho)
    unit = jnp.where(rho > 0, 1.0 / jnp.sqrt(2.0 * rho), jnp.inf)
    return tuple(s * unit for s in sensitivities)


def gaussian_std_per_step(sensitivity: Any, rho: Any, steps: int) -> jax.Array:
    """``sensitivity sqrt(steps / (2 rho))``: the std of each of ``steps`` Gaussian releases of
    l2-sensitivity ``sensitivity`` sharing ``rho`` evenly (``rho / steps`` each).

    Privacy: each release is ``rho / steps``-zCDP, so the ``steps`` releases are ``rho``-zCDP
    (sequential composition, Bun & Steinke 2016, Lemma 2.3).
    """
    return sensitivity * jnp.sqrt(steps / (2.0 * rho))


def host_gaussian_std_per_step(sensitivity: float, rho: float, steps: int) -> float:
    """:func:`gaussian_std_per_step` on the host in float64: ``sensitivity sqrt(steps / (2 rho))``.

    Privacy: each of the ``steps`` releases is ``rho / steps``-zCDP; together ``rho``-zCDP.
    """
    return float(sensitivity) * math.sqrt(steps / (2.0 * rho))


def laplace_scale(sensitivity: Any, epsilon: Any) -> jax.Array:
    """``sensitivity / epsilon``: the Laplace scale that makes a release of l1-sensitivity
    ``sensitivity`` ``epsilon``-DP (Dwork et al. 2006).

    Privacy: ``q(D) + Lap(scale)`` is ``epsilon``-DP, hence ``epsilon^2 / 2``-zCDP
    (:func:`pure_dp_rho`), under the relation ``sensitivity`` is for.
    """
    return sensitivity / epsilon


def pure_dp_rho(epsilon: Any) -> jax.Array:
    """``epsilon^2 / 2`` in float32: the zCDP of an ``epsilon``-DP release (Bun & Steinke 2016,
    Prop. 1.4); the traced counterpart of ``accounting.pure_dp_to_rho``.

    Privacy: an ``epsilon``-DP mechanism is ``epsilon^2 / 2``-zCDP.
    """
    return 0.5 * jnp.square(jnp.asarray(epsilon, jnp.float32))


def pure_dp_epsilon(rho: float) -> float:
    """``sqrt(2 rho)`` (host float): the ``epsilon`` whose pure-DP release is ``rho``-zCDP, the
    inverse of ``accounting.pure_dp_to_rho``.

    Privacy: an ``epsilon``-DP release with this ``epsilon`` is ``rho``-zCDP (Bun & Steinke 2016,
    Prop. 1.4).
    """
    return math.sqrt(2.0 * float(rho))


def clip_to_ball_scale(norms: Any, radius: Any) -> jax.Array:
    """``min(1, radius / norm)`` (1 for a zero norm): the factor that projects a vector of L2 norm
    ``norm`` onto the ball of radius ``radius`` (exact division, no rounding margin).

    Privacy: a sum of ``n`` projected vectors has l2-sensitivity ``radius`` under add/remove and
    ``2 radius`` under replace-one (up to float rounding of the norm; use
    ``privacy.bounding.clip_to_norm`` where a margin for that rounding is wanted).
    """
    return jnp.where(norms > radius, radius / jnp.where(norms > 0, norms, 1.0), 1.0)


def float32_rho_for_epsilon(epsilon: float, delta: float, *, method: str = "cks") -> float:
    """The largest float32 ``rho`` whose conversion ``zcdp_to_dp(rho, delta, method)`` is at most
    ``epsilon`` (for runs that hold ``rho`` in float32): ``accounting.dp_to_rho``'s value rounded to
    float32, then moved to the largest float32 that meets the target. Raises ``ValueError`` when no
    positive float32 does.

    Privacy: a ``rho``-zCDP run is then ``(epsilon, delta)``-DP (Bun & Steinke 2016, Prop. 1.3 for
    ``method="bun_steinke"``; Canonne, Kamath & Steinke 2020 for ``"cks"``).
    """
    def meets(r: np.float32) -> bool:
        return float(zcdp_to_dp(float(r), delta, method=method)) <= epsilon

    rho = np.float32(dp_to_rho(epsilon, delta, method=method))
    while rho > 0 and meets(np.nextafter(rho, np.float32(np.inf))):
        rho = np.nextafter(rho, np.float32(np.inf))
    while rho > 0 and not meets(rho):
        rho = np.nextafter(rho, np.float32(0.0))
    if not rho > 0:
        raise ValueError(f"epsilon={epsilon!r} is too small for a float32 rho at delta={delta!r}.")
    return float(rho)
