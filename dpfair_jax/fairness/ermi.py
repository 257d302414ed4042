"""ERMI (exponential Renyi mutual information) and its stochastic min-max form (paper 004).

Lowy, Gupta, Razaviyayn (ICLR 2023), "Stochastic differentially private and fair learning".

Soft predictions ``probs [n, l]`` (``F_j(x_i, theta)``; for a binary model with one logit, use
:func:`soft_predictions`, which returns ``F = [1 - p, p]``) and integer group ids ``s [n]`` in
``[0, k)``. Every function is jit- and vmap-able; groups enter through one-hot matmuls, never
through Python loops.

* :func:`ermi` -- Definition 3.1, ``sum_{j,r} p(j,r)^2 / (p(j) p_S(r)) - 1`` (chi^2 divergence
  between the joint and the product of marginals).
* :func:`ermi_eo` -- the equalized-odds form (Appendix B, eq. 5), weighted by ``p_Y(y)``
  (``weighted=False``: the unweighted sum over labels of the authors' code).
* :func:`psi` -- the per-example min-max term of Theorem 3.2 / C.1, in index form
  ``psi_i(W) = -sum_{r,j} W_rj^2 F_j + 2 sum_j W_{s_i j} F_j / sqrt(p_S(s_i)) - 1``,
  and :func:`psi_parts` (its part that does not depend on ``s_i`` and the part that does).
* :func:`psi_grad_w`, :func:`psi_grad_probs` -- Lemma D.1 in closed form (the theta-gradient is the
  chain rule through ``dpsi/dF``).
* :func:`w_star` -- the closed-form inner maximizer ``W*_rj = p(j,r) / (p(j) sqrt(p_S(r)))``;
  ``mean_i psi_i(W*) == ermi`` (exact identity).

Layout: ``W`` is ``[k, l]`` (groups x classes). For equalized odds there is one ``W`` per label,
``[l_y, k, l]``, and each example uses the block of its own label together with the conditional
group frequencies ``p_{S|Y}(. | y_i)`` (Appendix F.2.4); averaging those per-example terms over all
examples gives eq. 5 with its ``p_Y(y)`` weights.

Departures from the authors' code (notes II.10): the full ERMI with ``F = [1 - p, p]`` is the
default; :func:`ermi_one_cell` and ``cell_mask=one_cell_mask()`` reproduce the code's one-cell
regularizer ``P(yhat=1, s=0)^2 / (P(yhat=1) p_S(0)) - 1``, which is not zero under independence.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v

__all__ = [
    "soft_predictions",
    "soft_prediction",
    "select_row",
    "inv_sqrt_frequencies",
    "group_frequencies",
    "conditional_group_frequencies",
    "joint_distribution",
    "ermi",
    "ermi_eo",
    "ermi_one_cell",
    "w_star",
    "w_star_eo",
    "psi",
    "psi_parts",
    "psi_grad_w",
    "psi_grad_probs",
    "psi_batch",
    "mean_psi",
    "one_cell_mask",
    "strong_concavity",
]

_TINY = 1e-12


def soft_predictions(logits: jax.Array) -> jax.Array:
    """Class probabilities ``F(x, theta)`` from logits.

    ``logits [n]`` or ``[n, 1]`` (one logit per example, binary model): ``F = [1 - p, p]`` with
    ``p = sigmoid(logit)`` (the full two-class form, notes II.10-2). ``logits [n, l]`` with
    ``l >= 2``: softmax over the last axis.
    """
    logits = jnp.asarray(logits)
    if logits.ndim == 1 or logits.shape[-1] == 1:
        z = logits.reshape(logits.shape[:-1] if logits.ndim > 1 else logits.shape)
        return jnp.stack([jax.nn.sigmoid(-z), jax.nn.sigmoid(z)], axis=-1)
    return jax.nn.softmax(logits, axis=-1)


def soft_prediction(logits_i: jax.Array) -> jax.Array:
    """``F(x_i, theta) [l]`` of ONE example from its logits: a single logit (scalar or ``[1]``)
    gives ``[1 - p, p]``, ``l >= 2`` logits their softmax (:func:`soft_predictions` on one row)."""
    logits_i = jnp.asarray(logits_i)
    if logits_i.size == 1:
        return soft_predictions(jnp.reshape(logits_i, (1,)))[0]
    return soft_predictions(jnp.reshape(logits_i, (1, -1)))[0]


def select_row(W: jax.Array, i) -> jax.Array:
    """``W[i]`` as a masked sum over the leading axis (the same values). Its gradient in ``W`` is
    elementwise, where the gradient of ``W[i]`` is a scatter, which under a per-example ``vmap``
    (DP-SGDA's per-example gradients) runs serially on XLA's CPU backend."""
    hit = jnp.arange(W.shape[0]) == i
    return jnp.sum(jnp.where(hit.reshape((-1,) + (1,) * (W.ndim - 1)), W, 0.0), axis=0)


def inv_sqrt_frequencies(p: jax.Array) -> jax.Array:
    """``P_S^{-1/2}`` entrywise: ``1 / sqrt(p)`` for ``p > 0``, 0 for empty groups."""
    return jnp.where(p > 0, 1.0 / jnp.sqrt(jnp.maximum(p, _TINY)), 0.0)


def _weights(n: int, weights, dtype) -> jax.Array:
    return jnp.ones((n,), dtype) if weights is None else jnp.asarray(weights, dtype)


def group_frequencies(s: jax.Array, num_groups: int, weights=None) -> jax.Array:
    """``p_S(r) = (1/n) sum_i 1{s_i = r}`` (weighted by ``weights``, e.g. a padding mask)."""
    w = _weights(s.shape[0], weights, jnp.float32)
    counts = jax.nn.one_hot(s, num_groups, dtype=w.dtype).T @ w  # [k]
    return counts / jnp.maximum(jnp.sum(w), _TINY)


def conditional_group_frequencies(s, y, num_groups: int, num_labels: int, weights=None) -> jax.Array:
    """``p_{S|Y}(r | y)`` as ``[l_y, k]`` (rows for empty labels are zero)."""
    w = _weights(s.shape[0], weights, jnp.float32)
    y1 = jax.nn.one_hot(y, num_labels, dtype=w.dtype) * w[:, None]  # [n, l_y]
    joint = y1.T @ jax.nn.one_hot(s, num_groups, dtype=w.dtype)  # [l_y, k]
    return joint / jnp.maximum(jnp.sum(joint, axis=1, keepdims=True), _TINY)


def joint_distribution(probs: jax.Array, s: jax.Array, num_groups: int, weights=None) -> jax.Array:
    """Soft empirical joint ``p_{Yhat,S}(j, r) = (1/n) sum_i F_j(x_i) 1{s_i = r}`` as ``[k, l]``."""
    probs = jnp.asarray(probs)
    w = _weights(probs.shape[0], weights, probs.dtype)
    s1 = jax.nn.one_hot(s, num_groups, dtype=probs.dtype) * w[:, None]  # [n, k]
    return (s1.T @ probs) / jnp.maximum(jnp.sum(w), _TINY)


def _ermi_from_joint(joint: jax.Array) -> jax.Array:
    p_s = jnp.sum(joint, axis=1)  # [k]
    p_y = jnp.sum(joint, axis=0)  # [l]
    denom = p_s[:, None] * p_y[None, :]
    ratio = jnp.where(denom > 0, joint**2 / jnp.maximum(denom, _TINY), 0.0)
    return jnp.sum(ratio) - 1.0


def ermi(probs: jax.Array, s: jax.Array, num_groups: int, weights=None) -> jax.Array:
    """ERMI, Definition 3.1: ``sum_{j,r} p(j,r)^2 / (p(j) p_S(r)) - 1`` from soft predictions.

    ``probs [n, l]`` (rows sum to 1), ``s [n]`` ints in ``[0, num_groups)``. Zero iff the soft
    predictions are independent of ``s``; empty cells contribute 0 (no division by zero).
    """
    return _ermi_from_joint(joint_distribution(probs, s, num_groups, weights))


def ermi_eo(probs, s, y, num_groups: int, num_labels: int, *, weighted: bool = True, weights=None):
    """Equalized-odds ERMI, Appendix B eq. 5: ``sum_y p_Y(y) ERMI(Yhat, S | Y = y)``.

    ``weighted=False`` gives the unweighted ``sum_y ERMI(. | y)`` of the authors' code (II.10-11).
    """
    probs = jnp.asarray(probs)
    w = _weights(probs.shape[0], weights, probs.dtype)
    y1 = jax.nn.one_hot(y, num_labels, dtype=probs.dtype) * w[:, None]  # [n, l_y]
    s1 = jax.nn.one_hot(s, num_groups, dtype=probs.dtype)  # [n, k]
    # joint_y[y, r, j] = sum_i 1{y_i=y} 1{s_i=r} F_j(x_i)
    joint = jnp.einsum("ny,nk,nl->ykl", y1, s1, probs)
    n_y = jnp.sum(y1, axis=0)  # [l_y]
    cond = joint / jnp.maximum(n_y, _TINY)[:, None, None]
    per_label = jax.vmap(_ermi_from_joint)(cond)
    per_label = jnp.where(n_y > 0, per_label, 0.0)
    if weighted:
        return jnp.sum(per_label * n_y) / jnp.maximum(jnp.sum(n_y), _TINY)
    return jnp.sum(per_label)


def ermi_one_cell(probs, s, num_groups: int = 2, weights=None) -> jax.Array:
    """The authors' code's one-cell regularizer (notes II.10-2): ``p(1, 0)^2 / (p(1) p_S(0)) - 1``.

    Only the cell (prediction 1, group 0) survives their ``trace`` of a 1 x 2 matrix. Kept for the
    literal reproduction; it is NOT zero under independence (it equals ``p_Yhat(1) p_S(0) - 1`` there).
    """
    joint = joint_distribution(probs, s, num_groups, weights)
    p_s = jnp.sum(joint, axis=1)
    p_y = jnp.sum(joint, axis=0)
    return joint[0, 1] ** 2 / jnp.maximum(p_y[1] * p_s[0], _TINY) - 1.0


def one_cell_mask(num_groups: int = 2, num_classes: int = 2) -> jax.Array:
    """``[k, l]`` mask keeping only ``W[0, 1]``: with it the min-max form maximizes to
    :func:`ermi_one_cell` (the authors' logistic-regression code path)."""
    return jnp.zeros((num_groups, num_classes), jnp.float32).at[0, 1].set(1.0)


def w_star(probs, s, num_groups: int, weights=None) -> jax.Array:
    """Closed-form inner maximizer ``W*_rj = p(j,r) / (p(j) sqrt(p_S(r)))``, ``[k, l]`` (notes II.4).

    Entries for never-predicted classes or empty groups are 0. ``mean_psi(W*) == ermi``.
    """
    joint = joint_distribution(probs, s, num_groups, weights)
    p_s = jnp.sum(joint, axis=1)
    p_y = jnp.sum(joint, axis=0)
    denom = p_y[None, :] * jnp.sqrt(p_s)[:, None]
    return jnp.where(denom > 0, joint / jnp.maximum(denom, _TINY), 0.0)


def w_star_eo(probs, s, y, num_groups: int, num_labels: int, weights=None) -> jax.Array:
    """One closed-form maximizer per label, ``[l_y, k, l]`` (equalized-odds form)."""
    probs = jnp.asarray(probs)
    w = _weights(probs.shape[0], weights, probs.dtype)
    wy = jax.nn.one_hot(y, num_labels, dtype=probs.dtype) * w[:, None]  # [n, l_y]
    return jax.vmap(lambda col: w_star(probs, s, num_groups, col), in_axes=1)(wy)


def psi_parts(probs_i: jax.Array, s_i, W: jax.Array, p_s: jax.Array, *, masked_row: bool = False):
    """The two parts of ``psi_i`` (Theorem C.1): ``(public, sensitive)``.

    ``public = -sum_{r,j} W_rj^2 F_j - 1`` does not depend on ``s_i``;
    ``sensitive = 2 sum_j W_{s_i, j} F_j / sqrt(p_S(s_i))`` is the only term that does (the proof
    of Theorem 3.3 bounds the sensitivity of exactly this term). One example: ``probs_i [l]``,
    scalar ``s_i``, ``W [k, l]``, ``p_s [k]``. ``masked_row=True`` takes ``W[s_i]`` with
    :func:`select_row` (the same values; a gradient without scatter, for per-example gradients).
    """
    quad = -jnp.sum(jnp.sum(W * W, axis=0) * probs_i) - 1.0
    w_row = select_row(W, s_i) if masked_row else W[s_i]
    row = w_row * inv_sqrt_frequencies(p_s)[s_i]
    lin = 2.0 * jnp.sum(row * probs_i)
    return quad, lin


def psi(probs_i: jax.Array, s_i, W: jax.Array, p_s: jax.Array) -> jax.Array:
    """Per-example min-max term ``psi_i(theta, W)`` of Theorem 3.2 / C.1 (index form, notes II.4).

    ``-Tr(W diag(F) W^T) + 2 Tr(W E[yhat s^T] P_S^{-1/2}) - 1``
    ``= -sum_{r,j} W_rj^2 F_j + 2 sum_j W_{s_i j} F_j / sqrt(p_S(s_i)) - 1``.
    """
    a, b = psi_parts(probs_i, s_i, W, p_s)
    return a + b


def psi_grad_w(probs_i, s_i, W, p_s) -> jax.Array:
    """Lemma D.1 (second formula): ``grad_W psi_i = -2 W diag(F) + 2 P_S^{-1/2} s_i F^T``."""
    k = W.shape[0]
    e = jax.nn.one_hot(s_i, k, dtype=W.dtype) * inv_sqrt_frequencies(p_s)
    return -2.0 * W * probs_i[None, :] + 2.0 * e[:, None] * probs_i[None, :]


def psi_grad_probs(probs_i, s_i, W, p_s) -> jax.Array:
    """``d psi_i / d F_j = -sum_r W_rj^2 + 2 W_{s_i j} / sqrt(p_S(s_i))`` (Lemma D.1, first formula
    before the chain rule: ``grad_theta psi_i = sum_j grad_theta F_j * dpsi_i/dF_j``)."""
    return -jnp.sum(W * W, axis=0) + 2.0 * W[s_i] * inv_sqrt_frequencies(p_s)[s_i]


def psi_batch(probs, s, W, p_s) -> jax.Array:
    """``psi_i`` for every example, ``[n]``."""
    return jax.vmap(psi, in_axes=(0, 0, None, None))(probs, s, W, p_s)


def mean_psi(probs, s, W, p_s=None, weights=None, num_groups: int | None = None) -> jax.Array:
    """``(1/n) sum_i psi_i(W)``; ``p_s`` defaults to the empirical group frequencies."""
    k = W.shape[0] if num_groups is None else num_groups
    if p_s is None:
        p_s = group_frequencies(s, k, weights)
    vals = psi_batch(probs, s, W, p_s)
    w = _weights(vals.shape[0], weights, vals.dtype)
    return jnp.sum(w * vals) / jnp.maximum(jnp.sum(w), _TINY)


def strong_concavity(probs, weights=None) -> jax.Array:
    """Strong-concavity modulus in W of the average psi: ``mu = 2 min_j p_Yhat(j)`` (notes II.4)."""
    w = _weights(probs.shape[0], weights, probs.dtype)
    p_y = (w @ probs) / jnp.maximum(jnp.sum(w), _TINY)
    return 2.0 * jnp.min(p_y)


def check_inputs(probs, s, num_groups: int, name: str = "probs") -> None:
    """Host-side validation for the ERMI functions (shapes, finiteness, simplex rows, group ids)."""
    v.check_shape(name, probs, ndim=2)
    v.check_same_length(**{name: probs, "s": s})
    v.check_finite(name, probs)
    v.check_int("num_groups", num_groups, minimum=1)
    v.check_group_ids(s, num_groups, "s")
    arr = np.asarray(probs, dtype=np.float64)
    if np.any(arr < -1e-6) or np.any(np.abs(arr.sum(axis=1) - 1.0) > 1e-4):
        raise ValueError(
            f"{name} rows must be probability vectors (non-negative, summing to 1); "
            "pass soft_predictions(logits)."
        )
