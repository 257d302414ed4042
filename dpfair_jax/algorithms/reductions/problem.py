"""The CGOO problem (paper 002, Def. 1.2), its weighting reduction (Lemma 4.1 / Cor. 4.2), the
itemized loss vectors of a grid and their sensitivities (Lemma 5.1).

Privacy: :func:`loss_sensitivity` and :func:`h_sensitivity` state the replace-one sensitivities
the mechanisms of :mod:`.oracles` and :mod:`.cgoo` are calibrated to.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as V
from dpfair_jax.privacy.precision import full_precision
from dpfair_jax.privacy import release_noise as _rn

from .objectives import GroupFunction

__all__ = ["CGOO", "penalty_weight", "penalized", "penalized_grad", "loss_sensitivity", "h_sensitivity",
           "group_losses"]

Array = jax.Array


class CGOO(NamedTuple):
    """Constrained group-objective optimization (Def. 1.2): objective ``f``, constraint ``g <= 0``
    over a ``num_groups``-dimensional loss vector."""

    f: GroupFunction
    g: GroupFunction
    num_groups: int


def penalty_weight(alpha: float, num_groups: int, lipschitz_f: float = 1.0) -> float:
    """``G = (alpha + L_f sqrt(K)) / alpha`` (Cor. 4.2): minimizing ``h`` to within ``alpha`` then
    gives ``f <= f* + alpha`` and ``g <= alpha``."""
    V.check_positive("alpha", alpha)
    K = V.check_int("num_groups", num_groups)
    V.check_positive("lipschitz_f", lipschitz_f)
    return (float(alpha) + float(lipschitz_f) * math.sqrt(K)) / float(alpha)


def _penalty(gval: Array, smoothing: Any) -> Array:
    if smoothing is None:
        return jax.nn.relu(gval)
    t = jnp.asarray(smoothing, gval.dtype)
    return jax.nn.softplus(t * gval) / t


def penalized(problem: CGOO, l: Array, G: Any, *, smoothing: float | None = None) -> Array:
    """``h(l) = f(l) + G max(0, g(l))`` (Lemma 4.1). ``l: [..., K]``; ``G`` may be traced.

    ``smoothing=t`` replaces the hinge by ``softplus(t g)/t`` (an upper bound within ``log(2)/t``,
    ``G t L_g^2``-smooth): Frank-Wolfe's rate (Lemma B.2/B.4) needs a smooth ``h``, which the
    hinge is not (the paper assumes smooth ``f, g`` but not a smooth penalty)."""
    return problem.f(l) + jnp.asarray(G, jnp.float32) * _penalty(problem.g(l), smoothing)


def penalized_grad(problem: CGOO, l: Array, G: Any, *, variant: str = "corrected",
                   smoothing: float | None = None) -> Array:
    """The weight vector of Alg. 2 line 10 / Alg. 4: ``grad f(l) + G 1[g(l) >= 0] grad g(l)``
    (with ``smoothing=t`` the indicator becomes ``sigmoid(t g)``, the gradient of the smoothed
    penalty). ``variant="paper"`` drops ``G`` (line 10 as printed). ``l: [K]``."""
    V.check_choice("variant", variant, ("corrected", "paper"))
    gf = jax.grad(lambda z: problem.f(z))(l)
    gg = jax.grad(lambda z: problem.g(z))(l)
    gv = problem.g(l)
    if smoothing is None:
        on = (gv >= 0).astype(l.dtype)
    else:
        on = jax.nn.sigmoid(jnp.asarray(smoothing, l.dtype) * gv)
    scale = 1.0 if variant == "paper" else jnp.asarray(G, l.dtype)
    return gf + scale * on * gg


def loss_sensitivity(n: int, num_groups: int, *, norm: str = "l2") -> float:
    """Sensitivity of the itemized loss vector ``(1/n) sum_i ell(c, D_i)`` with per-example vectors in
    ``[0,1]^K`` under replace-one (``n`` is fixed, hence public): ``sqrt(K)/n`` (l2, Lemma 5.1) or
    ``K/n`` (l1).

    Per coordinate the sum moves by at most ``bounded_sum_sensitivity(0, 1)`` under replace-one
    (``dpfair_jax.privacy.relations``), so by ``sqrt(K)`` times that in l2 and ``K`` times in l1,
    before the division by ``n``. Add/remove is not offered: it changes ``n``. A record moving to
    another group is covered: the divisor is the total ``n`` (no group size), and the bound holds
    for any change of one record's vector in ``[0,1]^K`` (group losses: two coordinates move)."""
    n = V.check_int("n", n)
    K = V.check_int("num_groups", num_groups)
    V.check_choice("norm", norm, ("l2", "l1"))
    return _rn.itemized_loss_sensitivity(n, K, norm=norm)


def h_sensitivity(problem: CGOO, n: int, G: Any, *, variant: str = "corrected") -> Any:
    """Sensitivity of ``h(ell(c, D))`` for a fixed ``c`` (Lemma 5.1): ``(L_f + G L_g) sqrt(K)/n``;
    ``variant="paper"``: ``sqrt(K)(1 + G)/n`` (Alg. 1 line 3, valid only when ``L_f, L_g <= 1``).
    ``G`` may be traced (then the result is an array)."""
    V.check_choice("variant", variant, ("corrected", "paper"))
    V.check_positive("G", G, allow_zero=True)
    s = loss_sensitivity(n, problem.num_groups)
    if variant == "paper":
        return _rn.lipschitz_image_sensitivity(s, 1.0 + G)
    return _rn.lipschitz_image_sensitivity(s, problem.f.lipschitz + G * problem.g.lipschitz)


@full_precision
def group_losses(per_example_losses: Array, s: Array, num_groups: int, *, mask: Array | None = None,
                 n: int | None = None) -> Array:
    """Itemized group loss vectors ``l_k = (1/n) sum_i 1[s_i = k] loss_i`` (Def. 1.2's ``ell``).

    ``per_example_losses: [..., n]`` in ``[0, 1]`` (e.g. one row per grid candidate), ``s: int[n]``.
    Returns ``[..., K]``. ``n`` defaults to the number of (unmasked) rows; the sensitivities of
    Lemma 5.1 need it public (replace-one: fixed; with a data-dependent ``mask`` pass ``n``).
    One matmul with the one-hot group matrix, no loop over groups."""
    V.check_group_ids(s, num_groups)
    V.check_finite("per_example_losses", per_example_losses)
    onehot = jax.nn.one_hot(jnp.asarray(s), num_groups, dtype=jnp.float32)
    if mask is not None:
        onehot = onehot * jnp.asarray(mask, jnp.float32)[:, None]
    denom = jnp.sum(onehot) if n is None else jnp.asarray(float(n), jnp.float32)
    return (jnp.asarray(per_example_losses, jnp.float32) @ onehot) / denom


def _check_loss_matrix(L: Any, num_groups: int | None = None) -> None:
    V.check_shape("losses", L, ndim=2)
    V.check_finite("losses", L)
    if num_groups is not None and np.shape(L)[1] != num_groups:
        raise ValueError(f"losses must have num_groups={num_groups} columns, got shape {np.shape(L)}.")
    if not V.is_traced(L):
        arr = np.asarray(L)
        if arr.size and (arr.min() < -1e-6 or arr.max() > 1 + 1e-6):
            raise ValueError("losses must lie in [0, 1] (the sensitivities of Lemma 5.1 assume it); "
                             "clip or rescale the per-example losses.")
