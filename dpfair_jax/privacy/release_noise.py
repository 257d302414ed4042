"""Scales and sensitivities of the one-shot releases: output perturbation of a regularized
minimizer (paper 001), the marginal synthesizer's Gram matrix and noisy counts (paper 003), the
itemized loss vectors and the DP-GD oracle of the private reductions (paper 002).

Algorithms hand these functions a value, its sensitivity and a multiplier, ``epsilon`` or ``rho``,
and get the scale (or the noised value) back; the draws are :mod:`dpfair_jax.privacy.mechanisms`'.
Every function is plain arithmetic in its arguments (host floats, or traced arrays where stated).

Public names: :func:`minimizer_sensitivity`, :func:`gaussian_release`,
:func:`one_hot_gram_sensitivity`, :func:`zcdp_gaussian_std`, :func:`add_gaussian_for_rho_host`,
:func:`itemized_loss_sensitivity`, :func:`lipschitz_image_sensitivity`, :func:`laplace_scale`,
:func:`laplace_epsilon`, :func:`normalized_clipped_sum_sensitivity`,
:func:`gaussian_std_over_steps`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax.privacy import accounting as _acc
from dpfair_jax.privacy import relations as _rel
from dpfair_jax.privacy.mechanisms import gaussian_noise

__all__ = ["minimizer_sensitivity", "gaussian_release", "one_hot_gram_sensitivity", "zcdp_gaussian_std",
           "add_gaussian_for_rho_host", "itemized_loss_sensitivity", "lipschitz_image_sensitivity",
           "laplace_scale", "laplace_epsilon", "normalized_clipped_sum_sensitivity", "gaussian_std_over_steps"]


def minimizer_sensitivity(n: Any, reg: Any, lipschitz: Any) -> Any:
    """``Delta = 2 L / (n reg)``: L2 sensitivity of the minimizer of ``(1/n) sum_i l(theta; z_i) +
    (reg/2) ||theta||^2`` for an ``L``-Lipschitz convex loss (Chaudhuri, Monteleoni, Sarwate 2011,
    Corollary 8). Host floats or traced arrays (the same expression).

    Sensitivity: under replace-one only (``n`` fixed and public; add/remove changes ``n``)."""
    return 2.0 * lipschitz / (n * reg)


def gaussian_release(key: jax.Array, value: jax.Array, sensitivity: Any, noise_multiplier: Any
                     ) -> tuple[jax.Array, Any]:
    """``(value + N(0, std^2 I), std)`` with ``std = noise_multiplier * sensitivity`` (the key used
    as given; ``sensitivity`` is the value's L2 sensitivity under the relation the caller states;
    both may be traced).

    Privacy: the Gaussian mechanism with noise multiplier ``z = noise_multiplier``: ``(epsilon,
    delta)``-DP for ``epsilon = accounting.analytic_gaussian_epsilon(z, delta)`` (Balle & Wang
    2018), ``1/(2 z^2)``-zCDP, under the relation of ``sensitivity``."""
    std = noise_multiplier * sensitivity
    value = jnp.asarray(value)
    return value + gaussian_noise(key, value.shape, jnp.asarray(std, value.dtype), value.dtype), std


def one_hot_gram_sensitivity(num_columns: int) -> _rel.Sensitivity:
    """L2 sensitivity of the upper triangle (diagonal included) of ``O^T O``, ``O`` the one-hot
    rows of a table with ``d = num_columns`` categorical columns: one row adds 1 to ``d`` diagonal
    and ``d (d-1)/2`` off-diagonal entries, so ``sqrt(d (d+1)/2)`` under add/remove and
    ``sqrt(d (d+1))`` under replace-one (two rows' entries, disjoint in the worst case)."""
    d = int(num_columns)
    if d < 1:
        raise ValueError(f"num_columns must be >= 1, got {num_columns!r}.")
    return _rel.Sensitivity(math.sqrt(d * (d + 1) / 2.0), math.sqrt(d * (d + 1.0)))


def zcdp_gaussian_std(sensitivity: Any, rho: Any) -> jax.Array:
    """Per-entry std ``sensitivity / sqrt(2 rho)`` in float32 (``rho`` may be traced).

    Privacy: Gaussian noise of this std on a query of L2 sensitivity ``sensitivity`` is
    ``rho``-zCDP (Bun & Steinke 2016, Prop. 1.6) under the relation of the sensitivity."""
    return jnp.asarray(sensitivity, jnp.float32) / jnp.sqrt(2.0 * jnp.asarray(rho, jnp.float32))


def add_gaussian_for_rho_host(key: jax.Array, value: Any, sensitivity: float, rho: float) -> np.ndarray:
    """``value + z sensitivity / sqrt(2 rho)`` in float64 on the host, ``z`` a float32 unit draw
    (``mechanisms.gaussian_noise(key, value.shape, 1.0)``).

    Privacy: ``rho``-zCDP under the relation of ``sensitivity`` (its L2 sensitivity)."""
    value = np.asarray(value, np.float64)
    z = np.asarray(gaussian_noise(key, value.shape, 1.0), np.float64) * sensitivity
    return value + z / math.sqrt(2 * rho)


def itemized_loss_sensitivity(n: int, num_groups: int, *, norm: str = "l2") -> float:
    """Sensitivity of the itemized loss vector ``(1/n) sum_i ell_i`` with ``ell_i in [0, 1]^K``:
    ``sqrt(K)/n`` (l2, paper 002 Lemma 5.1) or ``K/n`` (l1): each coordinate's sum moves by at most
    ``relations.bounded_sum_sensitivity(0, 1)`` under replace-one.

    Sensitivity: replace-one only (``n`` fixed and public; add/remove changes the divisor)."""
    if norm not in ("l2", "l1"):
        raise ValueError(f"norm must be 'l2' or 'l1', got {norm!r}.")
    per_coordinate = _rel.bounded_sum_sensitivity(0.0, 1.0).under(_rel.REPLACE_ONE)
    return (math.sqrt(num_groups) if norm == "l2" else float(num_groups)) * per_coordinate / n


def lipschitz_image_sensitivity(sensitivity: Any, lipschitz: Any) -> Any:
    """``sensitivity * lipschitz``: the sensitivity of ``h(q(D))`` for an ``lipschitz``-Lipschitz
    ``h`` (in the norm of ``sensitivity``) of a query ``q``; ``lipschitz`` may be traced."""
    return sensitivity * lipschitz


def laplace_scale(sensitivity: Any, epsilon: Any) -> Any:
    """``sensitivity / epsilon``: the Laplace scale of an ``epsilon``-DP release of a query of L1
    sensitivity ``sensitivity`` (pure DP, under the relation of the sensitivity)."""
    return sensitivity / epsilon


def laplace_epsilon(sensitivity: Any, scale: Any) -> Any:
    """``sensitivity / scale``: the epsilon of a Laplace release with ``scale`` on a query of L1
    sensitivity ``sensitivity`` (pure DP). On traced ``scale``: ``inf`` where the scale is 0."""
    if isinstance(scale, jax.core.Tracer):
        noisy = scale > 0
        return jnp.where(noisy, sensitivity / jnp.where(noisy, scale, 1.0), jnp.inf)
    return sensitivity / scale


def normalized_clipped_sum_sensitivity(clip_norm: Any) -> _rel.Sensitivity:
    """Sensitivity of a sum of rows clipped to ``clip_norm`` that is later divided by the number of
    rows ``n``: ``2 C`` under replace-one (``n`` fixed), ``inf`` under add/remove (the divisor is a
    private count, so no finite noise covers the normalized release)."""
    return _rel.Sensitivity(math.inf, _rel.clipped_sum_sensitivity(clip_norm).under(_rel.REPLACE_ONE))


def gaussian_std_over_steps(epsilon: float, delta: float, steps: int, sensitivity: float) -> float:
    """Per-step Gaussian std so that ``steps`` releases of L2 sensitivity ``sensitivity`` are
    ``(epsilon, delta)``-DP: ``rho = accounting.dp_to_rho(epsilon, delta)`` (CKS), ``rho / steps``
    per step (zCDP composition), ``std = accounting.gaussian_sigma_for_rho(sensitivity, rho/steps)``."""
    rho = _acc.dp_to_rho(epsilon, delta)
    return _acc.gaussian_sigma_for_rho(sensitivity, rho / steps)
